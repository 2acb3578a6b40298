// Safetensors: Hugging Face's weight format, read and written.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON
// ({"NAME": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]},
// "__metadata__": {string: string}}), then the raw little-endian tensor
// bytes, offsets relative to the end of the header. A model directory holds
// either model.safetensors or shards listed by model.safetensors.index.json
// ({"metadata": {"total_size": ..}, "weight_map": {NAME: FILE}}).
//
// Reading maps the file (mmap) and validates the whole header when the file
// is opened: header length within the file, JSON object, known dtype,
// non-negative shape, byte size equal to shape × element size, and the
// tensors tiling the data exactly (sorted by offset, each starting where the
// previous one ended, the last ending at the file's end: no gaps, no
// overlaps, no trailing bytes, as the format's own reader requires). Anything else is a SafetensorsError naming
// the file (and the tensor); a malformed file never causes an out-of-bounds
// read. Tensors are copied out of the map (and converted to the requested
// dtype), so they outlive the file.
//
// Writing goes to a temporary name in the same folder, is fsynced, then
// renamed over the target: a reader sees the old file or the new one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>
#include "meshrun/error.hpp"
#include "meshrun/model/safetensors_header.hpp"

namespace meshrun {

// SafetensorsError and SafetensorsEntry: safetensors_header.hpp (torch-free).

// One .safetensors file, mapped read-only.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);  // throws SafetensorsError
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // data order (by offset)
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The tensor, converted to `dtype` when given (else its stored dtype).
  torch::Tensor load(const std::string& name, std::optional<torch::Dtype> dtype = std::nullopt) const;
  // A slice [start, start + length) along `dim`, without copying the rest
  // when dim is 0.
  torch::Tensor load_slice(const std::string& name, int64_t dim, int64_t start, int64_t length,
                           std::optional<torch::Dtype> dtype = std::nullopt) const;

 private:
  const SafetensorsEntry& entry(const std::string& name) const;
  std::string path_;
  const unsigned char* data_ = nullptr;  // start of the data section
  size_t mapped_size_ = 0;
  void* mapping_ = nullptr;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> by_name_;
  std::map<std::string, std::string> metadata_;
};

// The weights of a model directory: model.safetensors, or the shards of
// model.safetensors.index.json (every listed file must exist and hold the
// tensors the index puts there), or a single .safetensors file path.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& path);  // throws SafetensorsError
  bool contains(const std::string& name) const { return file_of_.count(name) > 0; }
  std::vector<std::string> names() const;
  const SafetensorsEntry& entry(const std::string& name) const;  // throws when missing
  torch::Tensor load(const std::string& name, std::optional<torch::Dtype> dtype = std::nullopt) const;
  torch::Tensor load_slice(const std::string& name, int64_t dim, int64_t start, int64_t length,
                           std::optional<torch::Dtype> dtype = std::nullopt) const;
  const std::string& path() const { return path_; }

 private:
  const SafetensorsFile& file_for(const std::string& name) const;
  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, size_t> file_of_;
};

using TensorList = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes `tensors` (any layout; converted to `dtype` when given) to `path`
// atomically. Names must be unique and not "__metadata__".
void write_safetensors(const std::string& path, const TensorList& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       std::optional<torch::Dtype> dtype = std::nullopt);

// Writes a model directory's weights: model.safetensors when they fit in
// `max_shard_bytes`, else model-0000i-of-0000n.safetensors (in the given
// order, a new shard when the next tensor would overflow; a tensor larger
// than the limit gets a shard of its own) plus model.safetensors.index.json.
// Removes weight files of the other layout left by an earlier save. Returns
// the file names written.
std::vector<std::string> write_safetensors_directory(const std::string& directory, const TensorList& tensors,
                                                     int64_t max_shard_bytes,
                                                     std::optional<torch::Dtype> dtype = std::nullopt,
                                                     const std::map<std::string, std::string>& metadata = {});

// "F32" <-> torch dtypes (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL).
std::string safetensors_dtype_name(torch::Dtype dtype);
torch::Dtype torch_dtype_of(const std::string& safetensors_dtype);  // throws SafetensorsError

// Small files beside the tensors (config.json, the index) are written with
// write_file_atomically (meshrun/ckpt/checkpoint.hpp).

}  // namespace meshrun
