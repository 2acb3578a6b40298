// How the model's LibTorch code calls the CUDA kernels of fused_kernels.hpp:
// which tensors they serve (CUDA, fp32 / bf16 / fp16, one dtype), the
// element type to pass, the current stream, and a failed launch turned into
// an exception. Private to src/model.
#pragma once

#include <torch/torch.h>

#include <initializer_list>
#include <optional>
#include <string>

#ifdef MESHRUN_HAVE_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "fused_kernels.hpp"
#include "meshrun/error.hpp"

namespace meshrun::model_detail::fused_cuda {

inline std::optional<Element> element_of(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat: return Element::f32;
    case torch::kBFloat16: return Element::bf16;
    case torch::kHalf: return Element::f16;
    default: return std::nullopt;
  }
}

// The kernels are enabled and every tensor is on one CUDA device with one
// element type they take.
inline bool serves(std::initializer_list<const torch::Tensor*> tensors) {
  if (!enabled() || tensors.size() == 0) return false;
  const torch::Tensor& first = **tensors.begin();
  if (!first.defined() || !first.is_cuda() || !element_of(first.scalar_type())) return false;
  for (const torch::Tensor* t : tensors)
    if (!t->defined() || t->device() != first.device() || t->scalar_type() != first.scalar_type()) return false;
  return true;
}

inline void* current_stream([[maybe_unused]] const torch::Tensor& on) {
#ifdef MESHRUN_HAVE_CUDA
  return c10::cuda::getCurrentCUDAStream(on.device().index()).stream();
#else
  return nullptr;
#endif
}

// The launching thread's current device set to the tensors' for the scope
// (a launch goes to the current device).
class OnDevice {
 public:
  explicit OnDevice([[maybe_unused]] const torch::Tensor& on)
#ifdef MESHRUN_HAVE_CUDA
      : guard_(on.device())
#endif
  {
  }

 private:
#ifdef MESHRUN_HAVE_CUDA
  c10::cuda::CUDAGuard guard_;
#endif
};

// A failed launch is the device's (a bad configuration or a sticky CUDA
// error from earlier work), not the recipe's.
inline void check_launch(const char* error, const char* kernel) {
  if (error != nullptr) throw Error(ErrorKind::internal, std::string("CUDA kernel ") + kernel + ": " + error);
}

}  // namespace meshrun::model_detail::fused_cuda
