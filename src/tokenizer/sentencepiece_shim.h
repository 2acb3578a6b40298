/* The C interface of the meshrun_sentencepiece module (sentencepiece_shim.cpp).
 * The module links libsentencepiece; meshrun loads it with dlopen and
 * RTLD_DEEPBIND so that sentencepiece's protobuf never meets LibTorch's.
 * Functions returning int return 0 on success; on failure *error is a
 * malloc'ed message for meshrun_spm_free. Buffers returned through out
 * parameters are malloc'ed too. */
#ifndef MESHRUN_SENTENCEPIECE_SHIM_H
#define MESHRUN_SENTENCEPIECE_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MESHRUN_SPM_ABI_VERSION 1

typedef struct meshrun_spm meshrun_spm;

int meshrun_spm_abi_version(void);
meshrun_spm* meshrun_spm_load(const char* path, char** error);
void meshrun_spm_close(meshrun_spm* model);
void meshrun_spm_free(void* buffer);

int meshrun_spm_encode(const meshrun_spm* model, const char* text, size_t length, int32_t** ids, size_t* count,
                       char** error);
int meshrun_spm_decode(const meshrun_spm* model, const int32_t* ids, size_t count, char** text, size_t* length,
                       char** error);

int32_t meshrun_spm_vocab_size(const meshrun_spm* model);
/* -1 when the model has none. */
int32_t meshrun_spm_bos_id(const meshrun_spm* model);
int32_t meshrun_spm_eos_id(const meshrun_spm* model);
int32_t meshrun_spm_pad_id(const meshrun_spm* model);
int32_t meshrun_spm_unk_id(const meshrun_spm* model);
/* -1 when `piece` is not in the vocabulary. */
int32_t meshrun_spm_piece_to_id(const meshrun_spm* model, const char* piece, size_t length);
/* The piece of `id` (a pointer into the model, valid while it is open). */
const char* meshrun_spm_id_to_piece(const meshrun_spm* model, int32_t id, size_t* length);
/* 1 for control symbols (<s>, </s>), 0 otherwise. */
int meshrun_spm_is_control(const meshrun_spm* model, int32_t id);

#ifdef __cplusplus
}
#endif

#endif
