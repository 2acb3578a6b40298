#include "meshrun/recipe/recipe.hpp"

namespace meshrun {

const RoleConfig* Recipe::role(Role wanted) const {
  for (const auto& r : roles)
    if (r.role == wanted) return &r;
  return nullptr;
}

bool Recipe::is_set(std::string_view dotted_key) const {
  return locations.find(dotted_key) != locations.end();
}

SourceLocation Recipe::where(std::string_view dotted_key) const {
  std::string path(dotted_key);
  while (true) {
    if (auto it = locations.find(path); it != locations.end()) return it->second;
    size_t dot = path.rfind('.');
    if (dot == std::string::npos) break;
    path.resize(dot);
  }
  return SourceLocation{file, 0, 0};
}

}  // namespace meshrun
