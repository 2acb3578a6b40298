// fused_kernels.hpp in a build without the CUDA toolkit (meson
// -Dgpu_kernels=disabled, or no nvcc): nothing is built, so nothing is
// enabled, and no launcher is ever reached (each caller asks enabled()
// first); were one reached, it fails loudly instead of doing nothing.
#include "fused_kernels.hpp"

namespace meshrun::model_detail::fused_cuda {
namespace {
constexpr const char* kAbsent = "this meshrun was built without its CUDA kernels (meson -Dgpu_kernels)";
}  // namespace

bool built() { return false; }
const char* architectures() { return ""; }

const char* swiglu_forward(Element, const void*, const void*, void*, int64_t, void*) { return kAbsent; }
const char* swiglu_backward(Element, const void*, const void*, const void*, void*, void*, int64_t, void*) {
  return kAbsent;
}
const char* rotary(Element, const void*, HeadsLayout, void*, HeadsLayout, const void*, const void*, int64_t, int64_t,
                   int64_t, int64_t, int64_t, int64_t, bool, void*) {
  return kAbsent;
}
const char* add_rms_norm_forward(Element, const void*, const void*, const void*, void*, void*, float*, int64_t,
                                 int64_t, float, bool, void*) {
  return kAbsent;
}
int64_t add_rms_norm_partials(int64_t rows, int) { return rows < 1 ? 1 : rows; }
const char* add_rms_norm_backward(Element, const void*, const void*, const void*, const void*, const float*, void*,
                                  float*, int64_t, int64_t, int64_t, bool, void*) {
  return kAbsent;
}

}  // namespace meshrun::model_detail::fused_cuda
