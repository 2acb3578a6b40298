// What this binary holds of meshrun's own CUDA kernels (src/model/cuda/,
// fused_kernels.hpp), for `meshrun --version`: "compiled for sm_80 sm_90",
// "... (off: MESHRUN_CUDA_KERNELS=0)" or "not compiled (LibTorch's kernels
// on CUDA)". Needs nothing of LibTorch.
#pragma once

#include <string>

namespace meshrun {

std::string gpu_kernels_description();

}  // namespace meshrun
