// The front end's side of engine.hpp (meshrun, no LibTorch): it has none of
// the engine's commands and sees no GPU memory of its own.
#include "engine.hpp"

namespace meshrun::cli {

const EngineCommands* engine_commands() { return nullptr; }

double visible_gpu_memory_gb(const Recipe&) { return 0; }

}  // namespace meshrun::cli
