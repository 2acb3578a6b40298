// meshrun-engine's side of engine.hpp: the commands that need LibTorch run
// in this process.
#include "engine.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/model/gpu_kernels.hpp"

namespace meshrun::cli {
namespace {

// The torch, CUDA and NCCL facts, and meshrun's own CUDA kernels.
std::string engine_build_facts() { return build_facts() + "\ncuda kernels: " + gpu_kernels_description(); }

}  // namespace

const EngineCommands* engine_commands() {
  static const EngineCommands commands{run_command, check_command, generate_command, ckpt_convert_command,
                                       engine_build_facts};
  return &commands;
}

double visible_gpu_memory_gb(const Recipe& recipe) {
  if (recipe.launch.device != "cuda" || recipe.launch.memory_gb > 0) return 0;
  return visible_gpu_memory_gib();
}

}  // namespace meshrun::cli
