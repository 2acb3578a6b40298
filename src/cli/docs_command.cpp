// `meshrun docs recipes`: prints docs/recipes.md as generated from the schema.
#include <cstdio>

#include "commands.hpp"
#include "meshrun/recipe/schema.hpp"

namespace meshrun::cli {

int docs_command(const std::string& topic) {
  if (topic != "recipes") return kUsage;
  std::fputs(schema_markdown().c_str(), stdout);
  return kOk;
}

}  // namespace meshrun::cli
