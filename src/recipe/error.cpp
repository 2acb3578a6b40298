// The error vocabulary (include/meshrun/error.hpp).
#include "meshrun/error.hpp"

#include <filesystem>
#include <fstream>

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
  }
  return "";
}

BoundedText read_bounded(const std::string& path, std::size_t max_bytes) {
  BoundedText out;
  std::error_code error;
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path, error)) {
    out.status = BoundedText::Status::unreadable;
    return out;
  }
  // Grown as read: a small file never costs max_bytes.
  constexpr std::size_t kChunk = 1u << 20;
  while (in && out.text.size() <= max_bytes) {
    const std::size_t before = out.text.size();
    out.text.resize(before + kChunk);
    in.read(out.text.data() + before, static_cast<std::streamsize>(kChunk));
    out.text.resize(before + static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) out.status = BoundedText::Status::unreadable;
  else if (out.text.size() > max_bytes) out.status = BoundedText::Status::too_large;
  if (!out.ok()) out.text.clear();
  return out;
}

}  // namespace meshrun
