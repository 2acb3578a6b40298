// RMSNorm as one autograd node: y = weight × (x / rms(x)), with rms over the
// last dim in fp32. Backward, with x̂ = x / rms and g' = g × weight:
//   dx = (g' − x̂ × mean(g' × x̂)) / rms,   dweight = Σ g × x̂.
//
// On the CPU, float rows go through the row kernels (row_kernels.hpp): one
// pass over x forward and one over (g, x) backward, where the tensor-op form
// makes four and nine; the weight's gradient is summed per thread's block
// of rows, then over the blocks. On CUDA, LibTorch's fused RMSNorm kernels
// (_fused_rms_norm and its backward: one read of x forward, one of (g, x)
// backward, in fp32 inside) where the tensor-op form launches a dozen
// element-wise kernels, each a pass over the activations.
//
// The residual add before a norm (the decoder layer's x + attention, then
// post_attention_layernorm) is one CUDA kernel of meshrun's own with the
// norm (fused_kernels.hpp): one pass over x and delta forward writing sum
// and y, one over (d y, d sum, sum) backward, where the unfused form reads
// the sum twice more and adds the two gradients in another kernel.
#include <ATen/Parallel.h>
#include <ATen/ops/_fused_rms_norm.h>
#include <ATen/ops/_fused_rms_norm_backward.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "fused_cuda_call.hpp"
#include "layers.hpp"
#include "row_kernels.hpp"

namespace meshrun::model_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool rows_fused_on_cpu(const torch::Tensor& x, const torch::Tensor& weight) {
  return x.device().is_cpu() && x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat &&
         x.is_contiguous() && weight.is_contiguous() && x.dim() >= 1 && weight.dim() == 1 &&
         x.size(-1) == weight.size(0) && x.numel() > 0;
}

bool fused_on_cuda(const torch::Tensor& x, const torch::Tensor& weight) {
  return x.is_cuda() && weight.device() == x.device() && x.scalar_type() == weight.scalar_type() &&
         x.is_contiguous() && weight.dim() == 1 && x.dim() >= 1 && x.size(-1) == weight.size(0) && x.numel() > 0;
}

torch::Tensor cpu_forward(const torch::Tensor& x, const torch::Tensor& weight, double eps, torch::Tensor& inverse_rms) {
  const int64_t n = x.size(-1), rows = x.numel() / n;
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = 1;
  inverse_rms = torch::empty(sizes, x.options());
  torch::Tensor y = torch::empty_like(x);
  const float* in = x.const_data_ptr<float>();
  const float* w = weight.const_data_ptr<float>();
  float* out = y.data_ptr<float>();
  float* inverse = inverse_rms.data_ptr<float>();
  const float epsilon = static_cast<float>(eps);
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = in + r * n;
      inverse[r] = inverse_rms_of(row, n, epsilon);
      rms_norm_row(out + r * n, row, w, inverse[r], n);
    }
  });
  return y;
}

// {grad_x, grad_weight}.
std::pair<torch::Tensor, torch::Tensor> cpu_backward(const torch::Tensor& grad, const torch::Tensor& x,
                                                     const torch::Tensor& weight, const torch::Tensor& inverse_rms) {
  const int64_t n = x.size(-1), rows = x.numel() / n;
  const torch::Tensor g = grad.to(torch::kFloat).contiguous();
  torch::Tensor grad_x = torch::empty_like(x);
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows));
  torch::Tensor partial = torch::zeros({blocks, n}, x.options());
  const float* gs = g.const_data_ptr<float>();
  const float* in = x.const_data_ptr<float>();
  const float* w = weight.const_data_ptr<float>();
  const float* inverse = inverse_rms.const_data_ptr<float>();
  float* dx = grad_x.data_ptr<float>();
  float* dw = partial.data_ptr<float>();
  // Fixed blocks of rows, not parallel_for's own split, so the weight's
  // gradient is summed in one order for a given thread count.
  at::parallel_for(0, blocks, 1, [&](int64_t first_block, int64_t last_block) {
    for (int64_t b = first_block; b < last_block; ++b) {
      for (int64_t r = rows * b / blocks; r < rows * (b + 1) / blocks; ++r)
        rms_norm_backward_row(dx + r * n, dw + b * n, gs + r * n, in + r * n, w, inverse[r], n);
    }
  });
  return {grad_x, blocks == 1 ? partial[0] : partial.sum(0)};
}

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps) {
    if (rows_fused_on_cpu(x, weight)) {
      torch::Tensor inverse_rms;
      torch::Tensor y = cpu_forward(x, weight, eps, inverse_rms);
      ctx->save_for_backward({x, weight, inverse_rms});
      ctx->saved_data["fused"] = true;
      return y;
    }
    if (fused_on_cuda(x, weight)) {
      auto [y, inverse_rms] = at::_fused_rms_norm(x, {x.size(-1)}, weight, eps);
      ctx->save_for_backward({x, weight, inverse_rms});
      ctx->saved_data["library"] = true;
      return y;
    }
    const torch::Tensor xf = x.scalar_type() == torch::kFloat ? x : x.to(torch::kFloat);
    const torch::Tensor inverse_rms = at::rsqrt(xf.square().mean(-1, /*keepdim=*/true).add_(eps));
    torch::Tensor normalised = xf * inverse_rms;
    if (normalised.scalar_type() != x.scalar_type()) normalised = normalised.to(x.scalar_type());
    ctx->save_for_backward({x, weight, inverse_rms});
    return normalised.mul_(weight);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& inverse_rms = saved[2];
    const torch::Tensor& grad = grads[0];
    if (ctx->saved_data.count("library") != 0) {
      auto [grad_x, grad_weight] = at::_fused_rms_norm_backward(
          grad.contiguous(), x, {x.size(-1)}, inverse_rms, weight, {ctx->needs_input_grad(0), ctx->needs_input_grad(1)});
      return {grad_x, grad_weight, torch::Tensor()};
    }
    if (ctx->saved_data.count("fused") != 0) {
      auto [grad_x, grad_weight] = cpu_backward(grad, x, weight, inverse_rms);
      return {ctx->needs_input_grad(0) ? grad_x : torch::Tensor(),
              ctx->needs_input_grad(1) ? grad_weight : torch::Tensor(), torch::Tensor()};
    }
    const torch::Tensor xf = x.scalar_type() == torch::kFloat ? x : x.to(torch::kFloat);
    const torch::Tensor normalised = xf * inverse_rms;

    torch::Tensor grad_weight;
    if (ctx->needs_input_grad(1)) {
      const torch::Tensor cast = normalised.scalar_type() == x.scalar_type() ? normalised : normalised.to(x.scalar_type());
      grad_weight = (grad * cast).reshape({-1, x.size(-1)}).sum(0).to(weight.scalar_type());
    }
    torch::Tensor grad_x;
    if (ctx->needs_input_grad(0)) {
      torch::Tensor scaled = grad * weight;
      if (scaled.scalar_type() != torch::kFloat) scaled = scaled.to(torch::kFloat);
      const torch::Tensor projection = (scaled * normalised).mean(-1, /*keepdim=*/true);
      grad_x = scaled.sub_(normalised * projection).mul_(inverse_rms);
      if (grad_x.scalar_type() != x.scalar_type()) grad_x = grad_x.to(x.scalar_type());
    }
    return {grad_x, grad_weight, torch::Tensor()};
  }
};

// The backward keeps a row of the weight's gradient per block in shared
// memory: rows up to 96 KiB of fp32 (every sm_80+ GPU grants that much).
constexpr int64_t kFusedAddNormWidth = 96 * 1024 / 4;

bool add_norm_fused_on_cuda(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight) {
  return fused_cuda::serves({&x, &delta, &weight}) && x.sizes() == delta.sizes() && x.is_contiguous() &&
         delta.is_contiguous() && weight.dim() == 1 && weight.is_contiguous() && x.dim() >= 1 &&
         x.size(-1) == weight.size(0) && x.numel() > 0 && weight.size(0) <= kFusedAddNormWidth;
}

struct AddRmsNormFunction : torch::autograd::Function<AddRmsNormFunction> {
  // {y, sum}.
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& delta,
                               const torch::Tensor& weight, double eps, bool plus_one) {
    const fused_cuda::OnDevice on(x);
    const int64_t n = x.size(-1), rows = x.numel() / n;
    torch::Tensor sum = torch::empty_like(x), y = torch::empty_like(x);
    torch::Tensor inverse_rms = torch::empty({rows}, x.options().dtype(torch::kFloat));
    fused_cuda::check_launch(
        fused_cuda::add_rms_norm_forward(*fused_cuda::element_of(x.scalar_type()), x.const_data_ptr(),
                                         delta.const_data_ptr(), weight.const_data_ptr(), sum.mutable_data_ptr(),
                                         y.mutable_data_ptr(), inverse_rms.mutable_data_ptr<float>(), rows, n,
                                         static_cast<float>(eps), plus_one, fused_cuda::current_stream(x)),
        "add_rms_norm_forward");
    ctx->save_for_backward({sum, weight, inverse_rms});
    ctx->saved_data["plus_one"] = plus_one;
    // An output nothing used gets no zeros of its size in backward: the
    // kernel's null gradient of the sum is that case.
    ctx->set_materialize_grads(false);
    return {y, sum};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& sum = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& inverse_rms = saved[2];
    const fused_cuda::OnDevice on(sum);
    const int64_t n = sum.size(-1), rows = sum.numel() / n;
    const auto own_layout = [&](const torch::Tensor& g) {
      return g.defined() ? g.to(sum.scalar_type()).contiguous() : g;
    };
    const torch::Tensor grad_y = grads[0].defined() ? own_layout(grads[0]) : torch::zeros_like(sum);
    const torch::Tensor grad_sum = own_layout(grads[1]);
    torch::Tensor grad_x = torch::empty_like(sum);
    const int64_t partials = fused_cuda::add_rms_norm_partials(rows, sum.device().index());
    torch::Tensor weight_partials = torch::empty({partials, n}, sum.options().dtype(torch::kFloat));
    fused_cuda::check_launch(
        fused_cuda::add_rms_norm_backward(*fused_cuda::element_of(sum.scalar_type()), grad_y.const_data_ptr(),
                                          grad_sum.defined() ? grad_sum.const_data_ptr() : nullptr,
                                          sum.const_data_ptr(), weight.const_data_ptr(),
                                          inverse_rms.const_data_ptr<float>(), grad_x.mutable_data_ptr(),
                                          weight_partials.mutable_data_ptr<float>(), partials, rows, n,
                                          ctx->saved_data["plus_one"].toBool(), fused_cuda::current_stream(sum)),
        "add_rms_norm_backward");
    torch::Tensor grad_weight;
    if (ctx->needs_input_grad(2)) grad_weight = weight_partials.sum(0).to(weight.scalar_type());
    // x and delta enter the sum alike: one gradient serves both (as an
    // add's backward hands its gradient to both operands).
    return {grad_x, grad_x, grad_weight, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

AddedNorm add_rms_norm_of(const torch::Tensor& x, const torch::Tensor& delta, const torch::Tensor& weight, double eps,
                          bool plus_one) {
  if (add_norm_fused_on_cuda(x, delta, weight)) {
    const variable_list out = AddRmsNormFunction::apply(x, delta, weight, eps, plus_one);
    return {out[0], out[1]};
  }
  torch::Tensor sum = x + delta;
  torch::Tensor normed = rms_norm_of(sum, weight, eps, plus_one);
  return {std::move(normed), std::move(sum)};
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

RmsNormImpl::RmsNormImpl(int64_t hidden, double eps, const torch::TensorOptions& options, bool plus_one)
    : eps_(eps), plus_one_(plus_one) {
  weight = register_parameter("weight", plus_one ? torch::zeros({hidden}, options) : torch::ones({hidden}, options));
}

torch::Tensor rms_norm_of(const torch::Tensor& x, const torch::Tensor& weight, double eps, bool plus_one) {
  if (!plus_one) return rms_norm(x, weight, eps);
  // Gemma's: scaled by 1 + w in fp32 and only then cast back (Llama casts
  // first), as transformers' Gemma2RMSNorm; LibTorch ops, autograd's own.
  const torch::Tensor x32 = x.to(torch::kFloat);
  const torch::Tensor normalised = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normalised * (weight.to(torch::kFloat) + 1.0)).to(x.scalar_type());
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) const { return rms_norm_of(x, weight, eps_, plus_one_); }

AddedNorm RmsNormImpl::add_and_forward(const torch::Tensor& x, const torch::Tensor& delta) const {
  return add_rms_norm_of(x, delta, weight, eps_, plus_one_);
}

}  // namespace meshrun::model_detail
