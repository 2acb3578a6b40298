// RMSNorm as one autograd node: y = weight × (x / rms(x)), with rms over the
// last dim in fp32. Backward, with x̂ = x / rms and g' = g × weight:
//   dx = (g' − x̂ × mean(g' × x̂)) / rms,   dweight = Σ g × x̂.
#include "layers.hpp"

namespace meshrun::model_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight, double eps) {
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

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  return RmsNormFunction::apply(x, weight, eps);
}

RmsNormImpl::RmsNormImpl(int64_t hidden, double eps, const torch::TensorOptions& options) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({hidden}, options));
}

}  // namespace meshrun::model_detail
