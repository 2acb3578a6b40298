// Feeds recipe text through the loader, the rules and the planner: lint but
// the hook script (Lua) and the data file (jsonl_fuzz). Lines "#---" split
// the input into main.toml, a.toml and b.toml, so includes reach real files.
// Expected: diagnostics (or a meshrun::Error); finding: anything else.
#include <filesystem>

#include "fuzz_support.hpp"
#include "meshrun/error.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"

using namespace meshrun;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split(fuzz::as_text(data, size), "\n#---\n", 3);
  const auto& dir = fuzz::scratch_dir();
  // Written or removed every time: a run depends on this input alone.
  const char* included[] = {"a.toml", "b.toml"};
  for (size_t i = 0; i < 2; ++i) {
    std::error_code ignored;
    if (i + 1 < parts.size()) fuzz::write_file(dir / included[i], parts[i + 1]);
    else std::filesystem::remove(dir / included[i], ignored);
  }
  try {
    Diagnostics diagnostics;
    const std::optional<Recipe> recipe = load_recipe_text(parts[0], (dir / "main.toml").string(), {}, diagnostics);
    if (recipe) {
      validate_recipe(*recipe, diagnostics);
      if (!diagnostics.has_errors()) {
        const Plan plan = make_plan(*recipe, ClusterShape::from_recipe(*recipe), diagnostics);
        (void)format_plan_text(plan);
        (void)format_plan_json(plan);
      }
    }
    (void)diagnostics.format();
  } catch (const Error&) {
  }
  return 0;
}
