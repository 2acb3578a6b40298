// `meshrun env [RECIPE]`: what this process learns from its launcher (rank,
// local rank, world size, node, master), for job scripts and debugging. With
// a recipe, its [launch] type is used and its world size is checked.
#include <cstdint>
#include <cstdio>
#include <limits>

#include "commands.hpp"
#include "meshrun/launch/env.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun::cli {

int env_command(const std::string& recipe_path, const CommonOptions& common, const std::string& format) {
  LaunchConfig launch;
  int expected_world_size = 0;  // no recipe: nothing to compare with
  std::string location;
  if (!recipe_path.empty()) {
    Diagnostics diagnostics;
    auto recipe = load_recipe(recipe_path, common.overrides(), diagnostics);
    const std::string diagnostics_text = diagnostics.format();
    std::fwrite(diagnostics_text.data(), 1, diagnostics_text.size(), stderr);
    if (!recipe) return kFailed;
    launch = recipe->launch;
    // In 64 bits: the schema bounds each factor, a hand-built LaunchConfig may not.
    const int64_t world_size = static_cast<int64_t>(launch.nodes) * launch.procs_per_node;
    if (world_size > std::numeric_limits<int>::max()) {
      std::fprintf(stderr, "%s: error: nodes × procs_per_node = %lld processes is more than any launcher starts\n",
                   recipe->where("launch.nodes").str().c_str(), static_cast<long long>(world_size));
      return kFailed;
    }
    expected_world_size = static_cast<int>(world_size);
    location = recipe->where("launch.nodes").str();
  }
  try {
    LaunchInfo info = detect_launch(ProcessEnvironment(), launch, expected_world_size, location);
    std::string text = format == "json" ? format_launch_info_json(info) + "\n" : format_launch_info_text(info);
    std::fputs(text.c_str(), stdout);
    return kOk;
  } catch (const LaunchEnvError& error) {
    std::fprintf(stderr, "meshrun env: %s\n", error.what());
    return kFailed;
  }
}

}  // namespace meshrun::cli
