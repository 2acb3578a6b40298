// Streaming xxh3-64 of a file, and fsync of files and directories
// (include/meshrun/ckpt/checkpoint.hpp).
#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun {
namespace {

std::string errno_text() { return std::strerror(errno); }

struct FileDescriptor {
  int fd = -1;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string file_checksum(const std::string& path) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw CheckpointError("cannot open " + path + ": " + errno_text());
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) throw CheckpointError("xxh3: cannot start a checksum");
  std::vector<char> buffer(std::size_t{4} << 20);
  while (true) {
    const ssize_t got = ::read(file.fd, buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      throw CheckpointError("cannot read " + path + ": " + errno_text());
    }
    if (got == 0) break;
    XXH3_64bits_update(state.get(), buffer.data(), static_cast<size_t>(got));
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(XXH3_64bits_digest(state.get())));
  return hex;
}

void fsync_path(const std::string& path) {
  FileDescriptor file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw CheckpointError("cannot open " + path + " to sync it: " + errno_text());
  if (::fsync(file.fd) != 0) throw CheckpointError("fsync of " + path + " failed: " + errno_text());
}

}  // namespace meshrun
