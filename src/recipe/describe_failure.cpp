// Failures as text for the user (include/meshrun/error.hpp): recipe-caused
// ones as lint diagnostics. Apart from error.cpp, which needs nothing.
#include "meshrun/recipe/diagnostics.hpp"
#include "meshrun/error.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {

std::string describe_failure(const std::exception& error, const Recipe* recipe) {
  const auto* meshrun_error = dynamic_cast<const Error*>(&error);
  if (!meshrun_error) return error.what();
  if (dynamic_cast<const DiagnosticError*>(&error)) return error.what();  // already diagnostics
  if (!meshrun_error->recipe_key().empty() && recipe) {
    Diagnostics diagnostics;
    diagnostics.error(recipe->where(meshrun_error->recipe_key()), meshrun_error->rule(), meshrun_error->what());
    std::string text = diagnostics.format();
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }
  return std::string(error_kind_name(meshrun_error->kind())) + " error: " + meshrun_error->what();
}

}  // namespace meshrun
