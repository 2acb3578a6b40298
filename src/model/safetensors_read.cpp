// Reading one .safetensors file through mmap. The header is checked in full
// when the file is opened (safetensors_header.cpp), so that load() can trust
// every offset.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "meshrun/model/safetensors.hpp"

namespace meshrun {
namespace {

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
  // Without blocking: a FIFO in a model's place would block the open for
  // ever; it is refused by the regular-file check below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
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
    SafetensorsHeader header = parse_safetensors_header(path, bytes, file_size);
    data_ = bytes + header.data_offset;
    entries_ = std::move(header.entries);
    metadata_ = std::move(header.metadata);
    for (size_t i = 0; i < entries_.size(); ++i) by_name_[entries_[i].name] = i;
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
