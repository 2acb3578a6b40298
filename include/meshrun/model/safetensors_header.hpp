// The header of a .safetensors file, parsed and checked without LibTorch
// (the format is described in safetensors.hpp): SafetensorsFile reads its
// tensors through it, and the fuzz target feeds it arbitrary bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/error.hpp"

namespace meshrun {

class SafetensorsError : public KindError<ErrorKind::io> {
 public:
  using KindError::KindError;
};

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", ... as in the header
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;  // where the data section starts in the file (8 + header length)
  std::vector<SafetensorsEntry> entries;  // data order (by offset)
  std::map<std::string, std::string> metadata;
};

// The header of a file whose whole contents are bytes[0, file_size), checked
// in full (see safetensors.hpp): afterwards every entry's [begin, end) lies
// inside the data section and matches its dtype and shape. Throws
// SafetensorsError naming `path` (and the tensor).
SafetensorsHeader parse_safetensors_header(const std::string& path, const unsigned char* bytes, uint64_t file_size);

// Bytes per element of a safetensors dtype ("BF16" -> 2); 0 for a name that
// is not one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL.
std::size_t safetensors_element_size(std::string_view dtype);

}  // namespace meshrun
