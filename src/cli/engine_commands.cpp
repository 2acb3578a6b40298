// meshrun-engine's side of engine.hpp: the commands that need LibTorch run
// in this process.
#include "engine.hpp"
#include "meshrun/dist/dist.hpp"

namespace meshrun::cli {

const EngineCommands* engine_commands() {
  static const EngineCommands commands{run_command, check_command, generate_command, ckpt_convert_command,
                                       build_facts};
  return &commands;
}

double visible_gpu_memory_gb(const Recipe& recipe) {
  if (recipe.launch.device != "cuda" || recipe.launch.memory_gb > 0) return 0;
  return visible_gpu_memory_gib();
}

}  // namespace meshrun::cli
