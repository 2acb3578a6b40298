// Checking a safetensors header (include/meshrun/model/safetensors_header.hpp).
// Torch-free, so that it can be fuzzed on its own; load() trusts every
// offset it accepts.
#include "meshrun/model/safetensors_header.hpp"

#include <algorithm>
#include <limits>
#include <tuple>

#include <nlohmann/json.hpp>

#include "meshrun/bounded_json.hpp"

namespace meshrun {
namespace {

// Not ordered_json: its objects find a key by a linear scan, so parsing a
// header of n entries took n² steps (100 k entries: 9 s; the size limit
// allows 1.75 M). Entries are put in data order instead.
using json = nlohmann::json;

// Larger headers are refused before parsing (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeSize {
  std::string_view name;
  std::size_t bytes;
};
constexpr DtypeSize kDtypeSizes[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"BOOL", 1},
};

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  throw SafetensorsError(path + ": " + what);
}

SafetensorsEntry parse_entry(const std::string& path, const std::string& name, const json& value,
                             uint64_t data_size) {
  const std::string where = "tensor \"" + name + "\": ";
  if (!value.is_object()) fail(path, where + "header entry is not an object");
  SafetensorsEntry entry;
  entry.name = name;
  auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) fail(path, where + "no dtype");
  entry.dtype = dtype->get<std::string>();
  const std::size_t element_size = safetensors_element_size(entry.dtype);
  if (element_size == 0) fail(path, where + "unsupported safetensors dtype \"" + entry.dtype + "\"");

  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) fail(path, where + "no shape");
  uint64_t elements = 1;
  // The product of the non-zero sizes must fit too: a tensor's strides are
  // computed from them even when another size is 0.
  uint64_t nonzero_elements = 1;
  for (const auto& size : *shape) {
    if (!size.is_number_unsigned()) fail(path, where + "shape " + json_excerpt(*shape) + " has a non-integer or negative size");
    const uint64_t n = size.get<uint64_t>();
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (n != 0 && nonzero_elements > std::numeric_limits<uint64_t>::max() / 16 / n))
      fail(path, where + "shape " + json_excerpt(*shape) + " is too large");
    elements *= n;
    if (n != 0) nonzero_elements *= n;
    entry.shape.push_back(static_cast<int64_t>(n));
  }

  auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
      !(*offsets)[1].is_number_unsigned())
    fail(path, where + "data_offsets must be two non-negative integers");
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  if (entry.begin > entry.end || entry.end > data_size)
    fail(path, where + "data_offsets [" + std::to_string(entry.begin) + ", " + std::to_string(entry.end) +
                   "] out of range of the " + std::to_string(data_size) + "-byte data section");
  const uint64_t expected = elements * element_size;
  if (entry.end - entry.begin != expected)
    fail(path, where + "holds " + std::to_string(entry.end - entry.begin) + " bytes but dtype " + entry.dtype +
                   " and shape " + json_excerpt(*shape) + " need " + std::to_string(expected));
  return entry;
}

std::string quoted(const SafetensorsEntry& entry) { return "\"" + entry.name + "\""; }

// Sorts the entries into data order (empty tensors by name) and checks that
// the non-empty ones tile the data section exactly, as the format requires
// (validate() in the reference implementation): the first starts at 0, each
// starts where the one before ended, the last ends at the section's end. A
// hole is more than waste: nlohmann keeps one of two entries with the same
// name, so a duplicate name shows up only as the hole its lost twin leaves.
void order_and_check_tiling(const std::string& path, std::vector<SafetensorsEntry>& entries, uint64_t data_size) {
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  const auto hole = [&](uint64_t begin, uint64_t end, const std::string& where) {
    fail(path, "bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") of the " +
                   std::to_string(data_size) + "-byte data section belong to no tensor (" + where +
                   "); the format allows no holes (a duplicate tensor name hides one)");
  };
  const SafetensorsEntry* previous = nullptr;
  for (const auto& entry : entries) {
    if (entry.begin == entry.end) continue;
    const uint64_t covered = previous ? previous->end : 0;
    if (entry.begin < covered)
      fail(path, "tensors " + quoted(*previous) + " and " + quoted(entry) + " overlap in the data section");
    if (entry.begin > covered)
      hole(covered, entry.begin,
           previous ? "between tensors " + quoted(*previous) + " and " + quoted(entry)
                    : "before tensor " + quoted(entry));
    previous = &entry;
  }
  const uint64_t covered = previous ? previous->end : 0;
  if (covered < data_size)
    hole(covered, data_size, previous ? "after tensor " + quoted(*previous) : "the header lists no tensor with data");
}

}  // namespace

std::size_t safetensors_element_size(std::string_view dtype) {
  for (const auto& info : kDtypeSizes)
    if (info.name == dtype) return info.bytes;
  return 0;
}

SafetensorsHeader parse_safetensors_header(const std::string& path, const unsigned char* bytes, uint64_t file_size) {
  if (file_size < 8) fail(path, "too short for a safetensors header (" + std::to_string(file_size) + " bytes)");
  uint64_t header_length = 0;
  for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
  if (header_length > file_size - 8)
    fail(path, "header length " + std::to_string(header_length) + " is larger than the file (" +
                   std::to_string(file_size) + " bytes)");
  if (header_length > kMaxHeaderBytes) fail(path, "header length " + std::to_string(header_length) + " is too large");
  const char* header_text = reinterpret_cast<const char*>(bytes + 8);
  json header = parse_bounded_json<json>(std::string_view(header_text, header_length), /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) fail(path, "header is not a JSON object");

  SafetensorsHeader out;
  out.data_offset = 8 + header_length;
  const uint64_t data_size = file_size - 8 - header_length;
  for (const auto& [name, value] : header.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) fail(path, "__metadata__ is not an object");
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) fail(path, "__metadata__ value of \"" + key + "\" is not a string");
        out.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    out.entries.push_back(parse_entry(path, name, value, data_size));
  }
  order_and_check_tiling(path, out.entries, data_size);
  return out;
}

}  // namespace meshrun
