#include "meshrun/train/train_threads.hpp"

#include <algorithm>
#include <thread>
#include <torch/torch.h>

namespace meshrun::train_detail {
namespace {

int positive_integer(const std::optional<std::string>& text) {
  if (!text || text->empty()) return 0;
  try {
    size_t used = 0;
    int value = std::stoi(*text, &used);
    return used == text->size() && value > 0 ? value : 0;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

int training_threads(const LaunchInfo& launch, const Environment& environment, unsigned hardware_threads) {
  if (int explicit_threads = positive_integer(environment.get("MESHRUN_THREADS"))) return explicit_threads;
  if (int omp_threads = positive_integer(environment.get("OMP_NUM_THREADS"))) return omp_threads;
  const int cores = static_cast<int>(std::max(1u, hardware_threads));
  return std::max(1, cores / std::max(1, launch.local_world_size));
}

void set_training_threads(const LaunchInfo& launch) {
  torch::set_num_threads(training_threads(launch, ProcessEnvironment(), std::thread::hardware_concurrency()));
}

}  // namespace meshrun::train_detail
