// Where launch variables are read from: the process's environment, or a map
// that tests fill in.
#include <cstdlib>
#include <string>
#include <utility>

#include "meshrun/launch/env.hpp"

namespace meshrun {

std::optional<std::string> ProcessEnvironment::get(std::string_view name) const {
  // getenv needs a NUL-terminated name; a string_view may not be one.
  const std::string terminated_name(name);
  const char* value = std::getenv(terminated_name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

MapEnvironment::MapEnvironment(std::map<std::string, std::string, std::less<>> variables)
    : variables_(std::move(variables)) {}

MapEnvironment::MapEnvironment(
    std::initializer_list<std::pair<const std::string, std::string>> variables)
    : variables_(variables) {}

std::optional<std::string> MapEnvironment::get(std::string_view name) const {
  auto found = variables_.find(name);
  if (found == variables_.end()) return std::nullopt;
  return found->second;
}

void MapEnvironment::set(std::string name, std::string value) {
  variables_.insert_or_assign(std::move(name), std::move(value));
}

void MapEnvironment::unset(std::string_view name) {
  auto found = variables_.find(name);
  if (found != variables_.end()) variables_.erase(found);
}

}  // namespace meshrun
