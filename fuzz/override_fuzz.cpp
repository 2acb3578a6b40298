// Feeds `--set key=value` overrides, one per line, onto a small valid recipe,
// then the cross-field rules. Expected: diagnostics (or a meshrun::Error);
// finding: anything else (fuzz_support.hpp).
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "meshrun/error.hpp"
#include "meshrun/recipe/recipe.hpp"

using namespace meshrun;

namespace {

constexpr std::string_view kBase = R"(algorithm = "sft"
[launch]
device = "cpu"
[roles.actor]
model = "builtin:tiny"
[data]
path = "data.jsonl"
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<Override> overrides;
  for (std::string_view line : fuzz::split(fuzz::as_text(data, size), "\n", 64))
    overrides.push_back(Override{std::string(line)});
  try {
    Diagnostics diagnostics;
    const std::optional<Recipe> recipe =
        load_recipe_text(kBase, (fuzz::scratch_dir() / "base.toml").string(), overrides, diagnostics);
    if (recipe) validate_recipe(*recipe, diagnostics);
    (void)diagnostics.format();
  } catch (const Error&) {
  }
  return 0;
}
