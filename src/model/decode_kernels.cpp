// The decode step's kernels (decode_kernels.hpp). The small-batch product: A micro-kernel holds MB
// rows of x against NB rows of W in MB × NB eight-lane accumulators (at
// most 4 × 3: twelve of the sixteen AVX registers, the other four for the
// loads), walks the inner dimension eight floats at a time and sums each
// accumulator's lanes at the end. Threads split W's rows; every thread
// walks all of x's rows for each block of W before moving on, so W streams
// through once.
// push/pop: in a unity build other files share this translation unit.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("O3")
#endif

#include "decode_kernels.hpp"
#include "row_kernels.hpp"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define MESHRUN_SMALL_BATCH_AVX2 1
#include <immintrin.h>
#endif

namespace meshrun::model_detail {

namespace {
thread_local bool decode_step_open = false;
}  // namespace

DecodeStepScope::DecodeStepScope() : outer_(decode_step_open) { decode_step_open = true; }
DecodeStepScope::~DecodeStepScope() { decode_step_open = outer_; }
bool in_decode_step() { return decode_step_open; }

#if MESHRUN_SMALL_BATCH_AVX2
namespace {

#define MESHRUN_AVX2 __attribute__((target("avx2,fma")))

MESHRUN_AVX2 inline float lanes_sum(__m256 v) {
  __m128 low = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  low = _mm_add_ps(low, _mm_movehl_ps(low, low));
  low = _mm_add_ss(low, _mm_shuffle_ps(low, low, 1));
  return _mm_cvtss_f32(low);
}

// y[m][n] = x[m] · w[n] for m < MB, n < NB; rows of `inner` floats.
template <int MB, int NB>
MESHRUN_AVX2 inline void micro_kernel(const float* x, const float* w, float* y, int64_t inner, int64_t y_stride) {
  __m256 acc[MB][NB];
#pragma GCC unroll 4
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 4
    for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_setzero_ps();
  for (int64_t i = 0; i < inner; i += 8) {
    __m256 wv[NB];
#pragma GCC unroll 4
    for (int n = 0; n < NB; ++n) wv[n] = _mm256_loadu_ps(w + n * inner + i);
#pragma GCC unroll 4
    for (int m = 0; m < MB; ++m) {
      const __m256 xv = _mm256_loadu_ps(x + m * inner + i);
#pragma GCC unroll 4
      for (int n = 0; n < NB; ++n) acc[m][n] = _mm256_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
#pragma GCC unroll 4
  for (int m = 0; m < MB; ++m)
#pragma GCC unroll 4
    for (int n = 0; n < NB; ++n) y[m * y_stride + n] = lanes_sum(acc[m][n]);
}

// All `rows` rows of x against NB rows of w.
template <int NB>
MESHRUN_AVX2 void column_block(const float* x, int64_t rows, const float* w, float* y, int64_t inner, int64_t out) {
  int64_t m = 0;
  for (; m + 4 <= rows; m += 4) micro_kernel<4, NB>(x + m * inner, w, y + m * out, inner, out);
  switch (rows - m) {
    case 3: micro_kernel<3, NB>(x + m * inner, w, y + m * out, inner, out); break;
    case 2: micro_kernel<2, NB>(x + m * inner, w, y + m * out, inner, out); break;
    case 1: micro_kernel<1, NB>(x + m * inner, w, y + m * out, inner, out); break;
    default: break;
  }
}

// The many-row form (more than kSmallBatchRows rows, up to
// kDecodeLinearRows): x is packed transposed in panels of 8V rows
// (xt[k][0 .. 8V)), so one k step is V vector loads of x, NB broadcasts of
// W[n][k] and V × NB fused multiply-adds whose lanes are outputs: no lanes
// to sum at the end, which is what holds the dot-product form above to
// some 40 % of a core's FMA rate once rows are many (docs/benchmarks.md).
// Each lane sums its k in order. acc[n][v] holds rows 8v .. 8v + 8 of
// column n, stored to a tile (tile[r × tile_stride + n]).
template <int V, int NB>
MESHRUN_AVX2 inline void panel_kernel(const float* xt, const float* w, int64_t inner, float* tile, int64_t tile_stride,
                                      int64_t rows_here) {
  __m256 acc[NB][V];
#pragma GCC unroll 6
  for (int n = 0; n < NB; ++n)
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[n][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < inner; ++k) {
    __m256 xv[V];
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) xv[v] = _mm256_loadu_ps(xt + 8 * V * k + 8 * v);
#pragma GCC unroll 6
    for (int n = 0; n < NB; ++n) {
      const __m256 wv = _mm256_broadcast_ss(w + n * inner + k);
#pragma GCC unroll 2
      for (int v = 0; v < V; ++v) acc[n][v] = _mm256_fmadd_ps(xv[v], wv, acc[n][v]);
    }
  }
  alignas(32) float lanes[8 * V];
#pragma GCC unroll 6
  for (int n = 0; n < NB; ++n) {
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) _mm256_store_ps(lanes + 8 * v, acc[n][v]);
    for (int64_t r = 0; r < rows_here; ++r) tile[r * tile_stride + n] = lanes[r];
  }
}

template <int V>
MESHRUN_AVX2 void panel_block(const float* xt, const float* w, int64_t inner, float* tile, int64_t tile_stride,
                              int64_t rows_here, int64_t width) {
  switch (width) {
    case 6: panel_kernel<V, 6>(xt, w, inner, tile, tile_stride, rows_here); break;
    case 5: panel_kernel<V, 5>(xt, w, inner, tile, tile_stride, rows_here); break;
    case 4: panel_kernel<V, 4>(xt, w, inner, tile, tile_stride, rows_here); break;
    case 3: panel_kernel<V, 3>(xt, w, inner, tile, tile_stride, rows_here); break;
    case 2: panel_kernel<V, 2>(xt, w, inner, tile, tile_stride, rows_here); break;
    default: panel_kernel<V, 1>(xt, w, inner, tile, tile_stride, rows_here); break;
  }
}

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// [Σ a0, Σ a1, …, Σ a7]: the eight vectors' lane sums in one vector.
MESHRUN_AVX2 inline __m256 lane_sums(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
  // t0: the low halves' sums of a0..a3, then their high halves'; t1 likewise.
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

// scores[j] = q · keys[j] for j < n; d a multiple of 8.
MESHRUN_AVX2 void key_scores(float* scores, const float* q, const float* const* keys, int64_t n, int64_t d) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 acc[8];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) {
      const __m256 qv = _mm256_loadu_ps(q + i);
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) acc[k] = _mm256_fmadd_ps(qv, _mm256_loadu_ps(keys[j + k] + i), acc[k]);
    }
    _mm256_storeu_ps(scores + j, lane_sums(acc));
  }
  for (; j < n; ++j) {
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < d; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(keys[j] + i), acc);
    scores[j] = lanes_sum(acc);
  }
}

// out[0 .. 8V) = Σ_j weights[j] · values[j][offset .. offset + 8V).
template <int V>
MESHRUN_AVX2 void weighted_values(float* out, const float* weights, const float* const* values, int64_t n, int64_t offset) {
  __m256 acc[V];
#pragma GCC unroll 8
  for (int c = 0; c < V; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; ++j) {
    const __m256 w = _mm256_set1_ps(weights[j]);
    const float* v = values[j] + offset;
#pragma GCC unroll 8
    for (int c = 0; c < V; ++c) acc[c] = _mm256_fmadd_ps(w, _mm256_loadu_ps(v + 8 * c), acc[c]);
  }
#pragma GCC unroll 8
  for (int c = 0; c < V; ++c) _mm256_storeu_ps(out + 8 * c, acc[c]);
}

}  // namespace

bool paged_decode_rows_avx2_applies(int64_t d) { return cpu_has_avx2_fma() && d > 0 && d % 8 == 0; }

MESHRUN_AVX2 void paged_decode_rows_avx2(float* out, const float* q, int64_t rows, const float* mask,
                                         const float* const* keys, const float* const* values, int64_t n, int64_t d,
                                         float* scores) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * n;
    key_scores(row, q + r * d, keys, n, d);
    softmax_row(row, mask, n);
    // 64 floats (eight registers) of the output row at a time.
    for (int64_t offset = 0; offset < d; offset += 64) {
      float* target = out + r * d + offset;
      switch (std::min<int64_t>(64, d - offset) / 8) {
        case 8: weighted_values<8>(target, row, values, n, offset); break;
        case 7: weighted_values<7>(target, row, values, n, offset); break;
        case 6: weighted_values<6>(target, row, values, n, offset); break;
        case 5: weighted_values<5>(target, row, values, n, offset); break;
        case 4: weighted_values<4>(target, row, values, n, offset); break;
        case 3: weighted_values<3>(target, row, values, n, offset); break;
        case 2: weighted_values<2>(target, row, values, n, offset); break;
        default: weighted_values<1>(target, row, values, n, offset); break;
      }
    }
  }
}

namespace {

// One weight's product in a call that shares x among several.
struct Product {
  const float* w;
  float* y;
  int64_t out;
};

// Which product, and where in it, a flat index over all their pieces of
// `piece` W rows falls (a call has at most a few products).
struct Piece {
  const Product* product;
  int64_t first;  // W row
};
Piece piece_at(const std::vector<Product>& products, int64_t index, int64_t piece) {
  for (const Product& product : products) {
    const int64_t pieces = (product.out + piece - 1) / piece;
    if (index < pieces) return {&product, index * piece};
    index -= pieces;
  }
  return {nullptr, 0};
}

int64_t pieces_of(const std::vector<Product>& products, int64_t piece) {
  int64_t total = 0;
  for (const Product& product : products) total += (product.out + piece - 1) / piece;
  return total;
}

// rows ≤ kSmallBatchRows: the dot-product form, threads splitting every
// product's W into blocks of 3 rows.
void few_rows_linears(const float* xp, int64_t rows, int64_t inner, const std::vector<Product>& products) {
  constexpr int64_t kBlock = 3;  // W rows per micro-kernel
  const int64_t blocks = pieces_of(products, kBlock);
  // A thread's share is worth starting only past some 64k multiply-adds.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (kBlock * inner * rows));
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const auto [product, n] = piece_at(products, b, kBlock);
      const int64_t width = std::min(kBlock, product->out - n), out = product->out;
      const float* w = product->w + n * inner;
      float* y = product->y + n;
      if (width == 3) column_block<3>(xp, rows, w, y, inner, out);
      else if (width == 2) column_block<2>(xp, rows, w, y, inner, out);
      else column_block<1>(xp, rows, w, y, inner, out);
    }
  });
}

// rows > kSmallBatchRows: x packed into panels of 16 transposed rows (the
// last of 8 when at most 8 remain), then threads split the products' W
// into chunks of up to kChunkColumns rows. A chunk meets every panel while
// its rows are in L2, and each panel's outputs for the chunk gather in a
// tile that is copied out a row at a time: stored straight into y, a
// panel's 16 rows lie `out` floats apart, which at a power-of-two width (a
// 4096 vocabulary, a 2048 hidden size) puts them all in one L1 set.
MESHRUN_AVX2 void many_rows_linears(const float* xp, int64_t rows, int64_t inner, const std::vector<Product>& products) {
  constexpr int64_t kBlockColumns = 6, kChunkColumns = 8 * kBlockColumns;
  struct Panel {
    int64_t first_row, rows, lanes;  // lanes: 16 or 8
    size_t offset;                   // into packed
  };
  std::vector<Panel> panels;
  size_t packed_size = 0;
  for (int64_t r = 0; r < rows;) {
    const int64_t lanes = rows - r <= 8 ? 8 : 16, here = std::min(lanes, rows - r);
    panels.push_back({r, here, lanes, packed_size});
    packed_size += static_cast<size_t>(lanes * inner);
    r += here;
  }
  std::vector<float> packed(packed_size, 0.0f);  // rows past the last stay 0
  for (const Panel& panel : panels)
    for (int64_t r = 0; r < panel.rows; ++r) {
      const float* row = xp + (panel.first_row + r) * inner;
      float* column = packed.data() + panel.offset + r;
      for (int64_t k = 0; k < inner; ++k) column[k * panel.lanes] = row[k];
    }
  // As many chunks as a multiple of the threads: a narrow W (128 rows: 22
  // blocks) split into chunks of 8 blocks would leave one thread twice
  // the other's work.
  const int64_t blocks = pieces_of(products, kBlockColumns), threads = at::get_num_threads();
  const int64_t wanted = threads * ((blocks + threads * 8 - 1) / (threads * 8));
  const int64_t chunk_columns = kBlockColumns * ((blocks + wanted - 1) / wanted);
  at::parallel_for(0, pieces_of(products, chunk_columns), 1, [&](int64_t begin, int64_t end) {
    alignas(32) float tile[16 * kChunkColumns];
    for (int64_t chunk = begin; chunk < end; ++chunk) {
      const auto [product, first] = piece_at(products, chunk, chunk_columns);
      const int64_t columns = std::min(chunk_columns, product->out - first);
      for (const Panel& panel : panels) {
        const float* xt = packed.data() + panel.offset;
        for (int64_t n = 0; n < columns; n += kBlockColumns) {
          const int64_t width = std::min(kBlockColumns, columns - n);
          const float* w = product->w + (first + n) * inner;
          if (panel.lanes == 16) panel_block<2>(xt, w, inner, tile + n, kChunkColumns, panel.rows, width);
          else panel_block<1>(xt, w, inner, tile + n, kChunkColumns, panel.rows, width);
        }
        for (int64_t r = 0; r < panel.rows; ++r)
          std::copy_n(tile + r * kChunkColumns, columns, product->y + (panel.first_row + r) * product->out + first);
      }
    }
  });
}

}  // namespace

bool small_batch_linear_applies(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!decode_step_open || !cpu_has_avx2_fma() || torch::GradMode::is_enabled() || x.dim() < 1 || weight.dim() != 2)
    return false;
  if (!x.device().is_cpu() || !weight.device().is_cpu() || x.scalar_type() != torch::kFloat ||
      weight.scalar_type() != torch::kFloat || !x.is_contiguous() || !weight.is_contiguous())
    return false;
  const int64_t inner = weight.size(1);
  if (x.size(-1) != inner || inner % 8 != 0 || inner == 0) return false;
  const int64_t rows = x.numel() / inner;
  return rows >= 1 && rows <= kDecodeLinearRows;
}

std::vector<torch::Tensor> small_batch_linears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights) {
  RECORD_FUNCTION("meshrun::small_batch_linear", std::vector<c10::IValue>());
  const int64_t inner = x.size(-1), rows = x.numel() / inner;
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  std::vector<torch::Tensor> outputs;
  std::vector<Product> products;
  for (const torch::Tensor& weight : weights) {
    sizes.back() = weight.size(0);
    outputs.push_back(torch::empty(sizes, x.options()));
    products.push_back({weight.const_data_ptr<float>(), outputs.back().data_ptr<float>(), weight.size(0)});
  }
  if (rows > kSmallBatchRows) many_rows_linears(x.const_data_ptr<float>(), rows, inner, products);
  else few_rows_linears(x.const_data_ptr<float>(), rows, inner, products);
  return outputs;
}

torch::Tensor small_batch_linear(const torch::Tensor& x, const torch::Tensor& weight) {
  return std::move(small_batch_linears(x, {weight}).front());
}

#else

bool small_batch_linear_applies(const torch::Tensor&, const torch::Tensor&) { return false; }
torch::Tensor small_batch_linear(const torch::Tensor& x, const torch::Tensor& weight) { return at::linear(x, weight); }
std::vector<torch::Tensor> small_batch_linears(const torch::Tensor& x, const std::vector<torch::Tensor>& weights) {
  std::vector<torch::Tensor> outputs;
  for (const torch::Tensor& weight : weights) outputs.push_back(at::linear(x, weight));
  return outputs;
}
bool paged_decode_rows_avx2_applies(int64_t) { return false; }
void paged_decode_rows_avx2(float* out, const float* q, int64_t rows, const float* mask, const float* const* keys,
                            const float* const* values, int64_t n, int64_t d, float* scores) {
  paged_decode_rows(out, q, rows, mask, keys, values, n, d, scores);
}

#endif

bool small_batch_linear_chosen(const torch::Tensor& x, const torch::Tensor& weight) {
  if (!small_batch_linear_applies(x, weight)) return false;
#if MESHRUN_SMALL_BATCH_AVX2
  // Measured on Intel's AVX-512 only: MKL has been slower on other
  // vendors' CPUs, where the many-row form keeps serving.
  static const bool mkl_takes_many_rows = __builtin_cpu_supports("avx512f") && __builtin_cpu_is("intel");
  if (mkl_takes_many_rows && x.numel() / x.size(-1) > kSmallBatchRows) return false;
#endif
  return true;
}

torch::Tensor linear_or_small_batch(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  if (!small_batch_linear_chosen(x, weight)) return at::linear(x, weight, bias);
  torch::Tensor y = small_batch_linear(x, weight);
  if (bias.defined()) y.add_(bias);
  return y;
}

}  // namespace meshrun::model_detail

#undef MESHRUN_AVX2
#undef MESHRUN_SMALL_BATCH_AVX2
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
