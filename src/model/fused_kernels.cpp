// Whether the model's CUDA paths use meshrun's own kernels
// (fused_kernels.hpp): built into this binary, and not turned off by
// MESHRUN_CUDA_KERNELS=0. Read once, at the first question: the model asks
// on every layer's call.
#include <atomic>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fused_kernels.hpp"
#include "meshrun/model/gpu_kernels.hpp"

namespace meshrun::model_detail::fused_cuda {
namespace {

bool from_environment() {
  const char* value = std::getenv("MESHRUN_CUDA_KERNELS");
  return built() && (value == nullptr || std::string_view(value) != "0");
}

std::atomic<bool>& switch_state() {
  static std::atomic<bool> state{from_environment()};
  return state;
}

}  // namespace

bool enabled() { return switch_state().load(std::memory_order_relaxed); }
void set_enabled(bool use) { switch_state().store(use && built(), std::memory_order_relaxed); }

}  // namespace meshrun::model_detail::fused_cuda

namespace meshrun {

std::string gpu_kernels_description() {
  namespace kernels = model_detail::fused_cuda;
  if (!kernels::built()) return "not compiled (LibTorch's kernels on CUDA)";
  return std::string("compiled for ") + kernels::architectures() +
         (kernels::enabled() ? "" : " (off: MESHRUN_CUDA_KERNELS=0)");
}

}  // namespace meshrun
