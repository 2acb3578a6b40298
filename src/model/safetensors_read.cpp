// Reading one .safetensors file through mmap. The header is checked in full
// when the file is opened, so that load() can trust every offset.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "meshrun/model/safetensors.hpp"

namespace meshrun {
namespace {

// Ordered, so that entries() keeps the header's order.
using json = nlohmann::ordered_json;

// Larger headers are refused before parsing (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

struct DtypeInfo {
  const char* name;
  torch::Dtype dtype;
};
constexpr DtypeInfo kDtypes[] = {
    {"F64", torch::kFloat64}, {"F32", torch::kFloat32}, {"F16", torch::kFloat16}, {"BF16", torch::kBFloat16},
    {"I64", torch::kInt64},   {"I32", torch::kInt32},   {"I16", torch::kInt16},   {"I8", torch::kInt8},
    {"U8", torch::kUInt8},    {"BOOL", torch::kBool},
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
  bool known = false;
  for (const auto& info : kDtypes) known = known || entry.dtype == info.name;
  if (!known) fail(path, where + "unsupported safetensors dtype \"" + entry.dtype + "\"");

  auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) fail(path, where + "no shape");
  uint64_t elements = 1;
  for (const auto& size : *shape) {
    if (!size.is_number_unsigned()) fail(path, where + "shape " + shape->dump() + " has a non-integer or negative size");
    const uint64_t n = size.get<uint64_t>();
    if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (n != 0 && elements > std::numeric_limits<uint64_t>::max() / 16 / n))
      fail(path, where + "shape " + shape->dump() + " is too large");
    elements *= n;
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
  const uint64_t expected = elements * c10::elementSize(torch_dtype_of(entry.dtype));
  if (entry.end - entry.begin != expected)
    fail(path, where + "holds " + std::to_string(entry.end - entry.begin) + " bytes but dtype " + entry.dtype +
                   " and shape " + shape->dump() + " need " + std::to_string(expected));
  return entry;
}

void check_no_overlap(const std::string& path, std::vector<SafetensorsEntry> entries) {
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  const SafetensorsEntry* previous = nullptr;
  for (const auto& entry : entries) {
    if (entry.begin == entry.end) continue;
    if (previous && entry.begin < previous->end)
      fail(path, "tensors \"" + previous->name + "\" and \"" + entry.name + "\" overlap in the data section");
    previous = &entry;
  }
}

}  // namespace

std::string safetensors_dtype_name(torch::Dtype dtype) {
  for (const auto& info : kDtypes)
    if (info.dtype == dtype) return info.name;
  throw SafetensorsError(std::string("dtype ") + c10::toString(dtype) + " cannot be stored in safetensors");
}

torch::Dtype torch_dtype_of(const std::string& name) {
  for (const auto& info : kDtypes)
    if (name == info.name) return info.dtype;
  throw SafetensorsError("unsupported safetensors dtype \"" + name + "\"");
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    ::close(fd);
    fail(path, "not a regular file");
  }
  const uint64_t file_size = static_cast<uint64_t>(info.st_size);
  if (file_size < 8) {
    ::close(fd);
    fail(path, "too short for a safetensors header (" + std::to_string(file_size) + " bytes)");
  }
  void* mapping = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) fail(path, std::string("cannot map: ") + std::strerror(errno));
  mapping_ = mapping;
  mapped_size_ = file_size;
  const auto* bytes = static_cast<const unsigned char*>(mapping);

  try {
    uint64_t header_length = 0;
    for (int i = 7; i >= 0; --i) header_length = (header_length << 8) | bytes[i];
    if (header_length > file_size - 8)
      fail(path, "header length " + std::to_string(header_length) + " is larger than the file (" +
                     std::to_string(file_size) + " bytes)");
    if (header_length > kMaxHeaderBytes) fail(path, "header length " + std::to_string(header_length) + " is too large");
    const char* header_text = reinterpret_cast<const char*>(bytes + 8);
    json header = json::parse(header_text, header_text + header_length, nullptr, /*allow_exceptions=*/false);
    if (header.is_discarded() || !header.is_object()) fail(path, "header is not a JSON object");

    data_ = bytes + 8 + header_length;
    const uint64_t data_size = file_size - 8 - header_length;
    for (const auto& [name, value] : header.items()) {
      if (name == "__metadata__") {
        if (!value.is_object()) fail(path, "__metadata__ is not an object");
        for (const auto& [key, text] : value.items()) {
          if (!text.is_string()) fail(path, "__metadata__ value of \"" + key + "\" is not a string");
          metadata_[key] = text.get<std::string>();
        }
        continue;
      }
      by_name_[name] = entries_.size();
      entries_.push_back(parse_entry(path, name, value, data_size));
    }
    check_no_overlap(path, entries_);
  } catch (...) {
    ::munmap(mapping_, mapped_size_);
    mapping_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_) ::munmap(mapping_, mapped_size_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const SafetensorsEntry* found = find(name);
  if (!found) fail(path_, "no tensor \"" + name + "\"");
  return *found;
}

torch::Tensor SafetensorsFile::load(const std::string& name, std::optional<torch::Dtype> dtype) const {
  const SafetensorsEntry& e = entry(name);
  // Copied into a fresh (aligned) tensor: the map's offsets need not be aligned.
  torch::Tensor out = torch::empty(e.shape, torch::TensorOptions().dtype(torch_dtype_of(e.dtype)));
  if (e.end > e.begin) std::memcpy(out.data_ptr(), data_ + e.begin, e.end - e.begin);
  return dtype && *dtype != out.scalar_type() ? out.to(*dtype) : out;
}

torch::Tensor SafetensorsFile::load_slice(const std::string& name, int64_t dim, int64_t start, int64_t length,
                                          std::optional<torch::Dtype> dtype) const {
  const SafetensorsEntry& e = entry(name);
  const int64_t rank = static_cast<int64_t>(e.shape.size());
  if (dim < 0 || dim >= rank || start < 0 || length < 0 || start + length > e.shape[dim])
    fail(path_, "tensor \"" + name + "\": slice [" + std::to_string(start) + ", " + std::to_string(start + length) +
                    ") of dim " + std::to_string(dim) + " is out of its shape");
  if (dim != 0) return load(name, dtype).narrow(dim, start, length).contiguous();
  std::vector<int64_t> shape = e.shape;
  shape[0] = length;
  torch::Tensor out = torch::empty(shape, torch::TensorOptions().dtype(torch_dtype_of(e.dtype)));
  const uint64_t row_bytes = e.shape[0] == 0 ? 0 : (e.end - e.begin) / static_cast<uint64_t>(e.shape[0]);
  if (row_bytes * static_cast<uint64_t>(length) > 0)
    std::memcpy(out.data_ptr(), data_ + e.begin + row_bytes * static_cast<uint64_t>(start),
                row_bytes * static_cast<uint64_t>(length));
  return dtype && *dtype != out.scalar_type() ? out.to(*dtype) : out;
}

}  // namespace meshrun
