// Writing safetensors files and sharded model directories. Every file goes
// to a temporary name beside its target, is fsynced and renamed, and the
// folder is fsynced, so a crash leaves the old file or the new one.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "meshrun/ckpt/checkpoint.hpp"
#include <set>

#include <nlohmann/json.hpp>

#include "meshrun/model/safetensors.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

class AtomicFile {
 public:
  explicit AtomicFile(std::string path)
      : path_(std::move(path)), temporary_(path_ + ".tmp." + std::to_string(::getpid())) {
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("cannot create");
  }
  ~AtomicFile() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(temporary_.c_str());
    }
  }
  void write(const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t written = ::write(fd_, bytes, size);
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) fail("cannot write");
      bytes += written;
      size -= static_cast<size_t>(written);
    }
  }
  void commit() {
    if (::fsync(fd_) != 0) fail("cannot fsync");
    if (::close(fd_) != 0) {
      fd_ = -1;
      fail("cannot close");
    }
    fd_ = -1;
    if (::rename(temporary_.c_str(), path_.c_str()) != 0) {
      const int error = errno;
      ::unlink(temporary_.c_str());
      throw SafetensorsError(path_ + ": cannot rename into place: " + std::strerror(error));
    }
    fs::path folder = fs::path(path_).parent_path();
    const int dir = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }

 private:
  [[noreturn]] void fail(const char* what) {
    throw SafetensorsError(path_ + ": " + what + " " + temporary_ + ": " + std::strerror(errno));
  }
  std::string path_, temporary_;
  int fd_ = -1;
};

torch::Tensor prepared(const torch::Tensor& tensor, std::optional<torch::Dtype> dtype) {
  torch::Tensor t = tensor.detach();
  if (t.device() != torch::kCPU) t = t.to(torch::kCPU);
  if (dtype && t.scalar_type() != *dtype) t = t.to(*dtype);
  return t.contiguous();
}

int64_t stored_bytes(const torch::Tensor& tensor, std::optional<torch::Dtype> dtype) {
  return tensor.numel() * static_cast<int64_t>(c10::elementSize(dtype ? *dtype : tensor.scalar_type()));
}

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

}  // namespace

void write_safetensors(const std::string& path, const TensorList& tensors,
                       const std::map<std::string, std::string>& metadata, std::optional<torch::Dtype> dtype) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  std::vector<torch::Tensor> data;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || !seen.insert(name).second)
      throw SafetensorsError(path + ": tensor name \"" + name + "\" is reserved or repeated");
    if (!tensor.defined()) throw SafetensorsError(path + ": tensor \"" + name + "\" is undefined");
    data.push_back(prepared(tensor, dtype));
    const torch::Tensor& t = data.back();
    const uint64_t bytes = static_cast<uint64_t>(t.numel()) * t.element_size();
    header[name] = {{"dtype", safetensors_dtype_name(t.scalar_type())},
                    {"shape", t.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(text.size()) >> (8 * i));

  AtomicFile file(path);
  file.write(length, sizeof length);
  file.write(text.data(), text.size());
  for (const auto& t : data)
    if (t.numel() > 0) file.write(t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size());
  file.commit();
}

std::vector<std::string> write_safetensors_directory(const std::string& directory, const TensorList& tensors,
                                                     int64_t max_shard_bytes, std::optional<torch::Dtype> dtype,
                                                     const std::map<std::string, std::string>& metadata) {
  if (max_shard_bytes <= 0) throw SafetensorsError(directory + ": the shard size limit must be positive");
  std::error_code ec;
  fs::create_directories(directory, ec);
  if (ec) throw SafetensorsError(directory + ": cannot create: " + ec.message());

  std::vector<TensorList> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const auto& named : tensors) {
    const int64_t bytes = stored_bytes(named.second, dtype);
    if (!shards.back().empty() && shard_bytes + bytes > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(named);
    shard_bytes += bytes;
    total_bytes += bytes;
  }

  const fs::path folder(directory);
  const fs::path index_path = folder / "model.safetensors.index.json";
  std::vector<std::string> written;
  if (shards.size() == 1) {
    write_safetensors((folder / "model.safetensors").string(), tensors, metadata, dtype);
    written.push_back("model.safetensors");
    fs::remove(index_path, ec);
  } else {
    nlohmann::ordered_json index;
    index["metadata"] = {{"total_size", total_bytes}};
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    for (size_t i = 0; i < shards.size(); ++i) {
      const std::string name = shard_name(i, shards.size());
      write_safetensors((folder / name).string(), shards[i], metadata, dtype);
      for (const auto& [tensor_name, tensor] : shards[i]) weight_map[tensor_name] = name;
      written.push_back(name);
    }
    index["weight_map"] = weight_map;
    write_file_atomically(index_path.string(), index.dump(2) + "\n");
    written.push_back(index_path.filename().string());
    fs::remove(folder / "model.safetensors", ec);
  }
  // Shards of an earlier save with another count would otherwise linger.
  const std::set<std::string> keep(written.begin(), written.end());
  for (const auto& item : fs::directory_iterator(folder, ec)) {
    const std::string name = item.path().filename().string();
    if (name.rfind("model-", 0) == 0 && name.size() > 12 && name.ends_with(".safetensors") && !keep.count(name))
      fs::remove(item.path(), ec);
  }
  return written;
}

}  // namespace meshrun
