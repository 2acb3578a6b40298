// Rotary position embeddings with Hugging Face's rotate_half convention: the
// head's first and second halves are the two coordinates of each rotated
// pair, so out = (x1·cos − x2·sin, x2·cos + x1·sin). Scaling as in
// transformers' rope_utils: linear divides the frequencies by the factor,
// dynamic (NTK) raises the base once positions pass max_position_embeddings,
// llama3 divides the low frequencies and blends the middle band, yarn
// interpolates the frequencies that turn fewer than beta_slow times over the
// original context, keeps those past beta_fast and ramps between, longrope
// divides each frequency by its own short or long factor; yarn and longrope
// also scale cos and sin (ModelConfig::rope_attention_factor()).
#include <algorithm>
#include <cmath>
#include <vector>

#include <ATen/Parallel.h>

#include "decode_kernels.hpp"
#include "fused_cuda_call.hpp"
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

// YaRN's blend, indexed by frequency i of head_dim / 2: the band edges are
// the frequency indices that turn beta_fast and beta_slow times over the
// original context.
torch::Tensor yarn_frequencies(const ModelConfig& config) {
  const RopeScaling& s = config.rope_scaling;
  const double dim = static_cast<double>(config.head_dim());
  const double base = config.rope_theta, context = static_cast<double>(config.rope_original_context());
  const auto band_edge = [&](double rotations) {
    return dim * std::log(context / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = band_edge(s.beta_fast), high = band_edge(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // a band of one index: a step, not a division by zero
  const torch::Tensor extrapolated = inverse_frequencies(base, config.head_dim());
  const torch::Tensor interpolated = extrapolated / s.factor;
  const torch::Tensor ramp =
      ((torch::arange(config.head_dim() / 2, torch::kFloat) - low) / (high - low)).clamp(0, 1);
  // ramp 0: below the band (fast-turning) keeps the extrapolated frequency.
  return interpolated * ramp + extrapolated * (1 - ramp);
}

torch::Tensor longrope_frequencies(const ModelConfig& config, int64_t max_position_seen) {
  const RopeScaling& s = config.rope_scaling;
  const bool beyond = max_position_seen + 1 > config.rope_original_context();
  const std::vector<double>& divisors = beyond ? s.long_factor : s.short_factor;
  const torch::Tensor factors =
      torch::tensor(divisors).to(torch::kFloat);
  return inverse_frequencies(config.rope_theta, config.head_dim()) / factors;
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

// x [b, s, h, d] with tables [b or 1, 1, s, d/2] of one shape: what both
// hand-written rotations (the CUDA kernel's and a CPU decode step's) take.
bool tables_fit(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x.dim() == 4 && x.size(3) % 2 == 0 && cos.dim() == 4 && cos.sizes() == sin.sizes() && cos.size(1) == 1 &&
         cos.size(2) == x.size(1) && cos.size(3) == x.size(3) / 2 && (cos.size(0) == x.size(0) || cos.size(0) == 1);
}

// A decode step's rotation on the CPU (fp32, no autograd): one pass from
// x [b, s, h, d] into the contiguous [b, h, s, d] result. Why hand-written:
// rotate_into's four broadcasting ops over strided halves each cost a
// dispatch and a thread team for a few thousand floats, eight a layer.
// The bits are rotate_into's: LibTorch's addcmul is one fused multiply-add
// onto the rounded product where the CPU has FMA (its AVX2 kernels), a
// rounded product and a sum where not, and so is each half here.
bool cpu_decode_rotary_serves(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (!in_decode_step() || torch::GradMode::is_enabled()) return false;
  const auto cpu_float = [](const torch::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == torch::kFloat; };
  return cpu_float(x) && cpu_float(cos) && cpu_float(sin) && tables_fit(x, cos, sin) && x.is_contiguous() &&
         cos.is_contiguous() && sin.is_contiguous();
}

// o1 ← x1·c − x2·s, o2 ← x2·c + x1·s over `half` pairs.
__attribute__((optimize("-ffp-contract=off"))) void rotate_pairs_unfused(float* o1, float* o2, const float* x1,
                                                                          const float* x2, const float* c,
                                                                          const float* s, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float first = x1[i] * c[i], second = x2[i] * c[i];
    o1[i] = first + -x2[i] * s[i];
    o2[i] = second + x1[i] * s[i];
  }
}

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define MESHRUN_ROTARY_FMA 1
__attribute__((target("fma"))) void rotate_pairs_fused(float* o1, float* o2, const float* x1, const float* x2,
                                                       const float* c, const float* s, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    o1[i] = std::fmaf(-x2[i], s[i], x1[i] * c[i]);
    o2[i] = std::fmaf(x1[i], s[i], x2[i] * c[i]);
  }
}
#endif

bool addcmul_is_fused() {
#if MESHRUN_ROTARY_FMA
  static const bool fused = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return fused;
#else
  return false;
#endif
}

}  // namespace

void rotate_decode_row(float* out, const float* x, const float* cos, const float* sin, int64_t half) {
#if MESHRUN_ROTARY_FMA
  if (addcmul_is_fused()) {
    rotate_pairs_fused(out, out + half, x, x + half, cos, sin, half);
    return;
  }
#endif
  rotate_pairs_unfused(out, out + half, x, x + half, cos, sin, half);
}

namespace {

torch::Tensor cpu_decode_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t batch = x.size(0), seq = x.size(1), heads = x.size(2), half = x.size(3) / 2;
  torch::Tensor out = torch::empty({batch, heads, seq, 2 * half}, x.options());
  const float* xp = x.const_data_ptr<float>();
  const float* cp = cos.const_data_ptr<float>();
  const float* sp = sin.const_data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t table_batch = cos.size(0) == 1 ? 0 : seq * half;
  const int64_t grain = std::max<int64_t>(1, 8192 / (2 * half));
  at::parallel_for(0, batch * heads * seq, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {  // row of out: (b, h, s)
      const int64_t b = row / (heads * seq), h = row / seq % heads, t = row % seq;
      const float* x1 = xp + ((b * seq + t) * heads + h) * 2 * half;
      const float* c = cp + b * table_batch + t * half;
      const float* s = sp + b * table_batch + t * half;
      rotate_decode_row(op + row * 2 * half, x1, c, s, half);
    }
  });
  return out;
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

fused_cuda::HeadsLayout heads_layout(const torch::Tensor& x) {  // [b, s, h, d]
  return {x.stride(0), x.stride(1), x.stride(2)};
}

// The tables [b or 1, 1, s, d/2] serve the kernel as they are when their
// last dimension is contiguous (a broadcast batch has stride 0).
bool kernel_takes(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return tables_fit(x, cos, sin) && x.stride(3) == 1 && cos.strides() == sin.strides() && cos.stride(3) == 1 &&
         fused_cuda::serves({&x, &cos, &sin});
}

// in [b, s, h, d] (any strides, last contiguous) rotated into out [b, s, h,
// d] by the kernel; in and out may be one tensor.
void rotate_on_cuda(const torch::Tensor& in, const torch::Tensor& out, const torch::Tensor& cos,
                    const torch::Tensor& sin, bool inverse) {
  const fused_cuda::OnDevice on(in);
  const int64_t table_batch_stride = cos.size(0) == 1 ? 0 : cos.stride(0);
  fused_cuda::check_launch(
      fused_cuda::rotary(*fused_cuda::element_of(in.scalar_type()), in.const_data_ptr(), heads_layout(in),
                         out.mutable_data_ptr(), heads_layout(out), cos.const_data_ptr(), sin.const_data_ptr(),
                         table_batch_stride, cos.stride(2), in.size(0), in.size(1), in.size(2), in.size(3) / 2,
                         inverse, fused_cuda::current_stream(in)),
      "rotary");
}

// The rotation written over x's own storage: one read and one write of q or
// k, with no new tensor, and the [b, h, s, d] attention layout as a view of
// it (SDPA and the paged cache take strided heads). On the CPU the same
// node runs through rotate_into (the reference the gpu suite compares with).
struct InPlaceRotaryFunction : torch::autograd::Function<InPlaceRotaryFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, const torch::Tensor& cos,
                               const torch::Tensor& sin) {
    if (kernel_takes(x, cos, sin)) {
      rotate_on_cuda(x, x, cos, sin, /*inverse=*/false);
    } else {
      const torch::Tensor heads_first = x.transpose(1, 2);
      torch::Tensor rotated = torch::empty(heads_first.sizes(), x.options());
      rotate_into(rotated, heads_first, cos, sin, /*inverse=*/false);
      heads_first.copy_(rotated);
    }
    ctx->mark_dirty({x});
    ctx->save_for_backward({cos, sin});
    return x;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& grad = grads[0];  // [b, s, h, d]
    torch::Tensor grad_x = torch::empty(grad.sizes(), grad.options());
    if (kernel_takes(grad, saved[0], saved[1])) {
      rotate_on_cuda(grad, grad_x, saved[0], saved[1], /*inverse=*/true);
    } else {
      rotate_into(grad_x.transpose(1, 2), grad.transpose(1, 2), saved[0], saved[1], /*inverse=*/true);
    }
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
    case RopeScaling::Type::yarn: return yarn_frequencies(config);
    case RopeScaling::Type::longrope: return longrope_frequencies(config, max_position_seen);
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

bool rope_depends_on_length(const ModelConfig& config) {
  return config.rope_scaling.type == RopeScaling::Type::dynamic || config.rope_scaling.type == RopeScaling::Type::longrope;
}

RotaryTables rotary_tables(const ModelConfig& config, const torch::Tensor& positions, torch::Dtype dtype,
                           int64_t max_position) {
  // Only dynamic and longrope scaling depend on it: elsewhere no read back
  // (a device sync on a GPU).
  if (max_position < 0 && rope_depends_on_length(config))
    max_position = positions.numel() == 0 ? 0 : positions.max().item<int64_t>();
  return rotary_tables_from(config, positions, rope_inverse_frequencies(config, max_position).to(positions.device()),
                            dtype);
}

RotaryTables rotary_tables_from(const ModelConfig& config, const torch::Tensor& positions,
                                const torch::Tensor& inverse, torch::Dtype dtype) {
  // [b, s, d/2] -> [b, 1, s, d/2]
  const torch::Tensor angles = (positions.to(torch::kFloat).unsqueeze(-1) * inverse).unsqueeze(1);
  // The attention scale, folded into the query's tables: 1/√head_dim, or
  // Gemma's query_pre_attn_scalar^-½.
  const double scale = 1.0 / std::sqrt(config.query_pre_attn_scalar > 0 ? config.query_pre_attn_scalar
                                                                         : static_cast<double>(config.head_dim()));
  const double attention_factor = config.rope_attention_factor();
  RotaryTables tables;
  torch::Tensor cos = angles.cos(), sin = angles.sin();
  if (attention_factor != 1.0) {
    cos.mul_(attention_factor);
    sin.mul_(attention_factor);
  }
  tables.cos = cos.to(dtype);
  tables.sin = sin.to(dtype);
  tables.query_cos = (cos * scale).to(dtype);
  tables.query_sin = (sin * scale).to(dtype);
  return tables;
}

namespace {
thread_local bool in_place_rotary_everywhere = false;
}  // namespace

InPlaceRotaryScope::InPlaceRotaryScope() : outer_(in_place_rotary_everywhere) { in_place_rotary_everywhere = true; }
InPlaceRotaryScope::~InPlaceRotaryScope() { in_place_rotary_everywhere = outer_; }

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (kernel_takes(x, cos, sin) || (in_place_rotary_everywhere && tables_fit(x, cos, sin) && x.stride(3) == 1))
    return apply_rotary_in_place(x, cos, sin);
  if (cpu_decode_rotary_serves(x, cos, sin)) return cpu_decode_rotary(x, cos, sin);
  return RotaryFunction::apply(x, cos, sin);
}

torch::Tensor apply_rotary_in_place(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return InPlaceRotaryFunction::apply(x, cos, sin).transpose(1, 2);
}

}  // namespace meshrun::model_detail
