// `meshrun env [RECIPE]`: what this process learns from its launcher (rank,
// local rank, world size, node, master), for job scripts and debugging. With
// a recipe, its [launch] type is used and its world size is checked.
#include <cstdio>

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
    std::fputs(diagnostics.format().c_str(), stderr);
    if (!recipe) return kFailed;
    launch = recipe->launch;
    expected_world_size = launch.nodes * launch.procs_per_node;
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
