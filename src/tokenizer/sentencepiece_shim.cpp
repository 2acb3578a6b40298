// The meshrun_sentencepiece module: libsentencepiece behind a C interface.
// Built as a shared module and loaded at run time only (see
// sentencepiece_tokenizer.cpp); never linked into a binary with LibTorch.
#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sentencepiece_shim.h"

struct meshrun_spm {
  sentencepiece::SentencePieceProcessor processor;
};

namespace {

char* copy(const std::string& text) {
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (!out) return nullptr;
  std::memcpy(out, text.data(), text.size());
  out[text.size()] = '\0';
  return out;
}

void set_error(char** error, const std::string& message) {
  if (error) *error = copy(message);
}

}  // namespace

extern "C" {

int meshrun_spm_abi_version(void) { return MESHRUN_SPM_ABI_VERSION; }

meshrun_spm* meshrun_spm_load(const char* path, char** error) {
  auto* model = new (std::nothrow) meshrun_spm;
  if (!model) {
    set_error(error, "out of memory");
    return nullptr;
  }
  const auto status = model->processor.Load(path);
  if (!status.ok()) {
    set_error(error, status.ToString());
    delete model;
    return nullptr;
  }
  return model;
}

void meshrun_spm_close(meshrun_spm* model) { delete model; }
void meshrun_spm_free(void* buffer) { std::free(buffer); }

int meshrun_spm_encode(const meshrun_spm* model, const char* text, size_t length, int32_t** ids, size_t* count,
                       char** error) {
  std::vector<int> pieces;
  const auto status = model->processor.Encode(std::string(text, length), &pieces);
  if (!status.ok()) {
    set_error(error, status.ToString());
    return 1;
  }
  *count = pieces.size();
  *ids = static_cast<int32_t*>(std::malloc(sizeof(int32_t) * (pieces.empty() ? 1 : pieces.size())));
  if (!*ids) {
    set_error(error, "out of memory");
    return 1;
  }
  for (size_t i = 0; i < pieces.size(); ++i) (*ids)[i] = pieces[i];
  return 0;
}

int meshrun_spm_decode(const meshrun_spm* model, const int32_t* ids, size_t count, char** text, size_t* length,
                       char** error) {
  const std::vector<int> pieces(ids, ids + count);
  for (int id : pieces)
    if (id < 0 || id >= model->processor.GetPieceSize()) {
      set_error(error, "unknown token id " + std::to_string(id));
      return 1;
    }
  std::string out;
  const auto status = model->processor.Decode(pieces, &out);
  if (!status.ok()) {
    set_error(error, status.ToString());
    return 1;
  }
  *length = out.size();
  *text = copy(out);
  if (!*text) {
    set_error(error, "out of memory");
    return 1;
  }
  return 0;
}

int32_t meshrun_spm_vocab_size(const meshrun_spm* model) { return model->processor.GetPieceSize(); }
int32_t meshrun_spm_bos_id(const meshrun_spm* model) { return model->processor.bos_id(); }
int32_t meshrun_spm_eos_id(const meshrun_spm* model) { return model->processor.eos_id(); }
int32_t meshrun_spm_pad_id(const meshrun_spm* model) { return model->processor.pad_id(); }
int32_t meshrun_spm_unk_id(const meshrun_spm* model) { return model->processor.unk_id(); }

int32_t meshrun_spm_piece_to_id(const meshrun_spm* model, const char* piece, size_t length) {
  const std::string text(piece, length);
  const int id = model->processor.PieceToId(text);
  // PieceToId answers unk_id for unknown pieces; only the unk piece itself maps there.
  if (id == model->processor.unk_id() && model->processor.IdToPiece(id) != text) return -1;
  return id;
}

const char* meshrun_spm_id_to_piece(const meshrun_spm* model, int32_t id, size_t* length) {
  if (id < 0 || id >= model->processor.GetPieceSize()) return nullptr;
  const std::string& piece = model->processor.IdToPiece(id);
  *length = piece.size();
  return piece.data();
}

int meshrun_spm_is_control(const meshrun_spm* model, int32_t id) {
  return id >= 0 && id < model->processor.GetPieceSize() && model->processor.IsControl(id) ? 1 : 0;
}

}  // extern "C"
