// Handing a command from the front end to meshrun-engine (engine.hpp).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "engine.hpp"
#include "meshrun/launch/launcher.hpp"
#include "src/cli/engine_path.hpp"

namespace meshrun::cli {
namespace fs = std::filesystem;

int hand_to_engine(char** argv) {
  std::vector<fs::path> candidates;
  std::string self;
  try {
    self = this_executable_path();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "meshrun: cannot find meshrun-engine: %s\n", error.what());
    return kFailed;
  }
  const fs::path folder = fs::path(self).parent_path();
  candidates.push_back(folder / kEngineName);
  candidates.push_back((folder / kEngineFromBinDir / kEngineName).lexically_normal());
  // LibTorch's OpenMP threads spin while they wait for each other; beside
  // another busy process (or more threads than cores) a spinning team waits
  // on a member the kernel has descheduled, and a step took 3-5x longer
  // than its share of the CPU (bench/contention_bench.py). Passive waiting
  // makes the job slow in proportion to the CPU it loses. libgomp reads
  // the variable once, when it loads, so it is set here, before the engine
  // (and the workers it starts) load LibTorch; a value the user set wins.
  ::setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  std::string tried;
  for (const fs::path& candidate : candidates) {
    if (::access(candidate.c_str(), X_OK) == 0) {
      ::execv(candidate.c_str(), argv);
      std::fprintf(stderr, "meshrun: cannot start the engine %s: %s\n", candidate.c_str(), std::strerror(errno));
      return kFailed;
    }
    tried += (tried.empty() ? "" : ", ") + candidate.string();
  }
  std::fprintf(stderr,
               "meshrun: this command needs meshrun-engine (meshrun with LibTorch), which is not at %s; "
               "build or install it with meshrun (ninja builds both)\n",
               tried.c_str());
  return kFailed;
}

bool nvidia_driver_present() {
  std::error_code error;
  if (fs::exists("/dev/nvidiactl", error)) return true;
  fs::directory_iterator gpus("/proc/driver/nvidia/gpus", error);
  return !error && gpus != fs::directory_iterator();
}

}  // namespace meshrun::cli
