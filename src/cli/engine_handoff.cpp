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
  // How LibTorch's OpenMP threads wait between parallel regions. Sleeping
  // at once (PASSIVE) costs a futex wake-up per region, which made a
  // one-process step 2-3x slower on a 2-core VM; libgomp's default spin of
  // milliseconds makes a team that shares its cores with another busy
  // process wait on a descheduled member, 3-5x slower than its share
  // (bench/contention_bench.py). A spin of about 0.1 ms (GOMP_SPINCOUNT,
  // which libgomp takes over the policy's) keeps a team that owns its cores
  // awake between regions, PASSIVE keeps it from spinning when the process
  // alone has more threads than CPUs, and the training loop shrinks the team
  // when other processes take its cores (src/train/train_threads.cpp).
  // libgomp reads the variables once, when it loads, so they are set here,
  // before the engine (and the workers it starts) load LibTorch; a choice
  // the user made (either variable set) wins.
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT")) {
    ::setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    ::setenv("GOMP_SPINCOUNT", "10000", 1);
  }
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
