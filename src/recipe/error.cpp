// The error vocabulary (include/meshrun/error.hpp).
#include "meshrun/error.hpp"

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

}  // namespace meshrun
