// SwiGLU's activation silu(gate) × up (layers.hpp). LibTorch computes it as
// silu, then mul, and their backwards as three more passes, saving silu's
// output besides gate and up; on the CPU one pass each way over the row
// kernels (row_kernels.hpp) is a few per cent of a small model's step
// (docs/benchmarks.md). Chunks of kGrain elements go to the intra-op threads.
// On CUDA, meshrun's kernel (fused_kernels.hpp) does the same: one read of
// gate and up forward, one of (grad, gate, up) backward, where LibTorch's
// silu, mul and their backwards make five passes.
#include <ATen/Parallel.h>

#include "fused_cuda_call.hpp"
#include "layers.hpp"
#include "row_kernels.hpp"

namespace meshrun::model_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kGrain = 16384;

bool swiglu_on_cpu(const torch::Tensor& gate, const torch::Tensor& up) {
  return gate.device().is_cpu() && up.device().is_cpu() && gate.scalar_type() == torch::kFloat &&
         up.scalar_type() == torch::kFloat && gate.sizes() == up.sizes() && gate.is_contiguous() &&
         up.is_contiguous();
}

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    torch::Tensor out = torch::empty_like(gate);
    const float* g = gate.const_data_ptr<float>();
    const float* u = up.const_data_ptr<float>();
    float* o = out.data_ptr<float>();
    at::parallel_for(0, gate.numel(), kGrain,
                     [&](int64_t begin, int64_t end) { swiglu_to(o + begin, g + begin, u + begin, end - begin); });
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& gate = saved[0];
    const torch::Tensor& up = saved[1];
    const torch::Tensor grad = grads[0].to(torch::kFloat).contiguous();
    torch::Tensor grad_gate = torch::empty_like(gate), grad_up = torch::empty_like(up);
    const float* g = gate.const_data_ptr<float>();
    const float* u = up.const_data_ptr<float>();
    const float* d = grad.const_data_ptr<float>();
    float* dg = grad_gate.data_ptr<float>();
    float* du = grad_up.data_ptr<float>();
    at::parallel_for(0, gate.numel(), kGrain, [&](int64_t begin, int64_t end) {
      swiglu_backward_to(dg + begin, du + begin, d + begin, g + begin, u + begin, end - begin);
    });
    return {grad_gate, grad_up};
  }
};

bool swiglu_on_cuda(const torch::Tensor& gate, const torch::Tensor& up) {
  return fused_cuda::serves({&gate, &up}) && gate.sizes() == up.sizes() && gate.is_contiguous() && up.is_contiguous();
}

struct CudaSwigluFunction : torch::autograd::Function<CudaSwigluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    const fused_cuda::OnDevice on(gate);
    torch::Tensor out = torch::empty_like(gate);
    fused_cuda::check_launch(fused_cuda::swiglu_forward(*fused_cuda::element_of(gate.scalar_type()),
                                                        gate.const_data_ptr(), up.const_data_ptr(),
                                                        out.mutable_data_ptr(), gate.numel(),
                                                        fused_cuda::current_stream(gate)),
                             "swiglu_forward");
    ctx->save_for_backward({gate, up});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& gate = saved[0];
    const torch::Tensor& up = saved[1];
    const fused_cuda::OnDevice on(gate);
    const torch::Tensor grad = grads[0].to(gate.scalar_type()).contiguous();
    torch::Tensor grad_gate = torch::empty_like(gate), grad_up = torch::empty_like(up);
    fused_cuda::check_launch(
        fused_cuda::swiglu_backward(*fused_cuda::element_of(gate.scalar_type()), grad.const_data_ptr(),
                                    gate.const_data_ptr(), up.const_data_ptr(), grad_gate.mutable_data_ptr(),
                                    grad_up.mutable_data_ptr(), gate.numel(), fused_cuda::current_stream(gate)),
        "swiglu_backward");
    return {grad_gate, grad_up};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  if (swiglu_on_cpu(gate, up)) return SwigluFunction::apply(gate, up);
  if (swiglu_on_cuda(gate, up)) return CudaSwigluFunction::apply(gate, up);
  return at::silu(gate) * up;
}

}  // namespace meshrun::model_detail
