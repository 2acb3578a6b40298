// Feeds whole .safetensors files to the torch-free header checks
// SafetensorsFile runs on open, then copies every accepted tensor the way
// load() does, so ASan sees any offset outside the file. Expected: a
// SafetensorsError; finding: anything else (tensor loading needs LibTorch).
#include <cstring>
#include <vector>

#include "fuzz_support.hpp"
#include "meshrun/error.hpp"
#include "meshrun/model/safetensors_header.hpp"

using namespace meshrun;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const SafetensorsHeader header = parse_safetensors_header("fuzz.safetensors", data, size);
    if (header.data_offset > size) __builtin_trap();
    unsigned checksum = 0;
    for (const SafetensorsEntry& entry : header.entries) {
      if (entry.begin > entry.end || entry.end > size - header.data_offset) __builtin_trap();
      std::vector<unsigned char> copy(entry.end - entry.begin);
      if (!copy.empty()) std::memcpy(copy.data(), data + header.data_offset + entry.begin, copy.size());
      for (unsigned char byte : copy) checksum += byte;
    }
    (void)checksum;
  } catch (const Error&) {
  }
  return 0;
}
