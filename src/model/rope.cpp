// Rotary position embeddings with Hugging Face's rotate_half convention: the
// head's first and second halves are the two coordinates of each rotated
// pair, so out = (x1·cos − x2·sin, x2·cos + x1·sin). Scaling as in
// transformers' rope_utils: linear divides the frequencies by the factor,
// dynamic (NTK) raises the base once positions pass max_position_embeddings,
// llama3 divides the low frequencies and blends the middle band.
#include <cmath>

#include "layers.hpp"

namespace meshrun::model_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor inverse_frequencies(double base, int64_t head_dim) {
  auto exponents = torch::arange(0, head_dim, 2, torch::kInt64).to(torch::kFloat) / static_cast<double>(head_dim);
  return torch::pow(base, exponents).reciprocal();
}

torch::Tensor llama3_frequencies(const torch::Tensor& inverse, const RopeScaling& s) {
  const double old_context = static_cast<double>(s.original_max_position);
  const double low_wavelength = old_context / s.low_freq_factor;
  const double high_wavelength = old_context / s.high_freq_factor;
  const torch::Tensor wavelength = 2 * M_PI / inverse;
  torch::Tensor scaled = torch::where(wavelength > low_wavelength, inverse / s.factor, inverse);
  const torch::Tensor smooth = (old_context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const torch::Tensor blended = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const torch::Tensor medium = (wavelength >= high_wavelength).logical_and(wavelength <= low_wavelength);
  return torch::where(medium, blended, scaled);
}

// out[b, h, s, :] from x[b, s, h, :] rotated by (cos, sin), or by
// (cos, −sin) for the backward (the inverse rotation).
void rotate_into(const torch::Tensor& out, const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                 bool inverse) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  torch::Tensor o1 = out.narrow(-1, 0, half), o2 = out.narrow(-1, half, half);
  at::mul_out(o1, x1, cos);
  o1.addcmul_(x2, sin, inverse ? 1 : -1);
  at::mul_out(o2, x2, cos);
  o2.addcmul_(x1, sin, inverse ? -1 : 1);
}

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    ctx->save_for_backward({cos, sin});
    torch::Tensor out = torch::empty({x.size(0), x.size(2), x.size(1), x.size(3)}, x.options());
    rotate_into(out, x.transpose(1, 2), cos, sin, /*inverse=*/false);
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& grad = grads[0];  // [b, h, s, d]
    torch::Tensor grad_x = torch::empty({grad.size(0), grad.size(2), grad.size(1), grad.size(3)}, grad.options());
    rotate_into(grad_x.transpose(1, 2), grad, saved[0], saved[1], /*inverse=*/true);
    return {grad_x, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rope_inverse_frequencies(const ModelConfig& config, int64_t max_position_seen) {
  const int64_t head_dim = config.head_dim();
  const RopeScaling& s = config.rope_scaling;
  switch (s.type) {
    case RopeScaling::Type::none: return inverse_frequencies(config.rope_theta, head_dim);
    case RopeScaling::Type::linear: return inverse_frequencies(config.rope_theta, head_dim) / s.factor;
    case RopeScaling::Type::llama3: return llama3_frequencies(inverse_frequencies(config.rope_theta, head_dim), s);
    case RopeScaling::Type::dynamic: {
      const int64_t length = max_position_seen + 1;
      double base = config.rope_theta;
      if (config.max_position > 0 && length > config.max_position) {
        const double ratio = s.factor * static_cast<double>(length) / static_cast<double>(config.max_position) -
                             (s.factor - 1);
        base *= std::pow(ratio, static_cast<double>(head_dim) / static_cast<double>(head_dim - 2));
      }
      return inverse_frequencies(base, head_dim);
    }
  }
  return inverse_frequencies(config.rope_theta, head_dim);
}

RotaryTables rotary_tables(const ModelConfig& config, const torch::Tensor& positions, torch::Dtype dtype,
                           int64_t max_position) {
  if (max_position < 0) max_position = positions.numel() == 0 ? 0 : positions.max().item<int64_t>();
  const torch::Tensor inverse = rope_inverse_frequencies(config, max_position).to(positions.device());
  // [b, s, d/2] -> [b, 1, s, d/2]
  const torch::Tensor angles = (positions.to(torch::kFloat).unsqueeze(-1) * inverse).unsqueeze(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(config.head_dim()));
  RotaryTables tables;
  const torch::Tensor cos = angles.cos(), sin = angles.sin();
  tables.cos = cos.to(dtype);
  tables.sin = sin.to(dtype);
  tables.query_cos = (cos * scale).to(dtype);
  tables.query_sin = (sin * scale).to(dtype);
  return tables;
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return RotaryFunction::apply(x, cos, sin);
}

}  // namespace meshrun::model_detail
