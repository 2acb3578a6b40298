// The error vocabulary (include/meshrun/error.hpp).
#include "meshrun/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace meshrun {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::config: return "config";
    case ErrorKind::data: return "data";
    case ErrorKind::io: return "io";
    case ErrorKind::dist: return "dist";
    case ErrorKind::hook: return "hook";
    case ErrorKind::model: return "model";
    case ErrorKind::internal: return "internal";
  }
  return "internal";
}

Error::Error(ErrorKind kind, const std::string& message, std::string recipe_key, std::string rule)
    : std::runtime_error(message), kind_(kind), recipe_key_(std::move(recipe_key)), rule_(std::move(rule)) {}

std::string BoundedText::problem(std::size_t max_bytes) const {
  switch (status) {
    case Status::ok: return "";
    case Status::unreadable: return "cannot be read";
    case Status::too_large: return "is larger than " + std::to_string(max_bytes >> 20) + " MiB";
    case Status::not_a_file: return "is a pipe or socket, not a file";
  }
  return "";
}

bool path_present(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

BoundedText read_bounded(const std::string& path, std::size_t max_bytes) {
  BoundedText out;
  // Opened without blocking and checked before reading: a FIFO with no
  // writer would block open() and read() for ever, and a terminal read().
  // Devices that answer at once (/dev/zero) are read up to the bound.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    out.status = BoundedText::Status::unreadable;
    return out;
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0 || S_ISDIR(info.st_mode)) {
    ::close(fd);
    out.status = BoundedText::Status::unreadable;
    return out;
  }
  if (S_ISFIFO(info.st_mode) || S_ISSOCK(info.st_mode)) {
    ::close(fd);
    out.status = BoundedText::Status::not_a_file;
    return out;
  }
  // Grown as read: a small file never costs max_bytes.
  constexpr std::size_t kChunk = 1u << 20;
  while (out.text.size() <= max_bytes) {
    const std::size_t before = out.text.size();
    out.text.resize(before + kChunk);
    const ssize_t got = ::read(fd, out.text.data() + before, kChunk);
    if (got < 0 && errno == EINTR) {
      out.text.resize(before);
      continue;
    }
    if (got < 0) {  // EAGAIN from a device with nothing to give, or an I/O error
      out.status = BoundedText::Status::unreadable;
      break;
    }
    out.text.resize(before + static_cast<std::size_t>(got));
    if (got == 0) break;
  }
  ::close(fd);
  if (out.ok() && out.text.size() > max_bytes) out.status = BoundedText::Status::too_large;
  if (!out.ok()) out.text.clear();
  return out;
}

}  // namespace meshrun
