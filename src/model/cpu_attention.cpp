// Blocked causal attention on the CPU (cpu_attention.hpp). The forward keeps
// each unit's probabilities packed block after block (block i is a dense
// [rows_i, keys_i] matrix), which is all the backward needs besides q, k, v.
// Backward per block, with P the probabilities and dO the output gradient:
//   dP = dO vᵀ,  dv += Pᵀ dO,  dS = P ∘ (dP − rowsum(P ∘ dP)),
//   dq = dS k,   dk += dSᵀ q.
// Each query head accumulates its own dk and dv; a group's heads are summed
// into their kv head at the end, so no two threads ever write one row.
//
// Inside a block everything works on raw pointers: the products go straight
// to the BLAS that LibTorch itself uses (single-threaded inside this
// parallel region), and the softmax rows are plain loops. At 256 tokens a
// layer has a few thousand blocks, and tensor views and dispatched
// operations per block cost more than the arithmetic of the small ones.
#include "cpu_attention.hpp"
#include "decode_kernels.hpp"
#include "row_kernels.hpp"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

// Fortran BLAS: the torch wheel's libtorch_cpu exports its MKL's sgemm_ (so
// the process holds one BLAS and one OpenMP runtime; at::native::cpublas's
// gemm is not exported). Weak, so that a torch that exports no BLAS still
// links; the attention then declines and the bmm path serves.
extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                       const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                       const float* beta, float* c, const int* ldc) __attribute__((weak));

namespace meshrun::model_detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Query rows per block: a [64, seq] block of scores stays in L2 up to
// several thousand keys, and 64 rows keep the GEMMs efficient.
constexpr int64_t kBlockRows = 64;

// Row-major C[m×n] = op(A) op(B) + beta C, with row strides lda, ldb, ldc:
// BLAS is column-major, so it computes Cᵀ = op(B)ᵀ op(A)ᵀ.
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  const char ta = transpose_b ? 'T' : 'N', tb = transpose_a ? 'T' : 'N';
  const int mm = static_cast<int>(n), nn = static_cast<int>(m), kk = static_cast<int>(k);
  const int lda_ = static_cast<int>(ldb), ldb_ = static_cast<int>(lda), ldc_ = static_cast<int>(ldc);
  const float one = 1.0f;
  sgemm_(&ta, &tb, &mm, &nn, &kk, &one, b, &lda_, a, &ldb_, &beta, c, &ldc_);
}

struct Block {
  int64_t first_row, rows, keys, offset;  // offset into the unit's packed probabilities
};

// Query row i sits at key position positions[i] (ascending; null: i), so
// a block meets the keys up to its last row's position.
std::vector<Block> blocks_of(int64_t seq, const int64_t* positions, int64_t* packed) {
  std::vector<Block> blocks;
  *packed = 0;
  for (int64_t first = 0; first < seq; first += kBlockRows) {
    const int64_t rows = std::min(kBlockRows, seq - first);
    const int64_t keys = (positions ? positions[first + rows - 1] : first + rows - 1) + 1;
    blocks.push_back({first, rows, keys, *packed});
    *packed += rows * keys;
  }
  return blocks;
}

// The shapes of one call, from q [batch, heads, seq, dim] and k [batch ×
// kv_heads, keys, dim]; unit u is (sequence u / heads, query head u % heads).
struct Shape {
  int64_t batch, heads, kv_heads, seq, keys, dim;
  Shape(const torch::Tensor& q, const torch::Tensor& k)
      : batch(q.size(0)),
        heads(q.size(1)),
        kv_heads(k.size(0) / q.size(0)),
        seq(q.size(2)),
        keys(k.size(1)),
        dim(q.size(3)) {}
  int64_t units() const { return batch * heads; }
  int64_t group() const { return heads / kv_heads; }
  int64_t kv_unit(int64_t unit) const { return unit / heads * kv_heads + unit % heads / group(); }
  int64_t matrix() const { return seq * dim; }
  int64_t key_matrix() const { return keys * dim; }
};

// The query positions as a CPU int64 array checked against the keys.
const int64_t* checked_positions(const torch::Tensor& positions, const Shape& shape) {
  if (positions.dim() != 1 || positions.size(0) != shape.seq || positions.scalar_type() != torch::kInt64 ||
      !positions.device().is_cpu() || !positions.is_contiguous())
    throw std::logic_error("cpu_causal_attention: query positions must be a contiguous CPU int64 [" +
                           std::to_string(shape.seq) + "], got " + c10::str(positions.sizes()));
  const int64_t* data = positions.data_ptr<int64_t>();
  for (int64_t i = 0; i < shape.seq; ++i)
    if (data[i] < 0 || data[i] >= shape.keys || (i > 0 && data[i] <= data[i - 1]))
      throw std::logic_error("cpu_causal_attention: query positions must ascend within [0, " +
                             std::to_string(shape.keys) + ")");
  return data;
}

struct CpuAttentionFunction : torch::autograd::Function<CpuAttentionFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in, const torch::Tensor& k_in,
                               const torch::Tensor& v_in, const torch::Tensor& mask_in,
                               const torch::Tensor& positions) {
    RECORD_FUNCTION("meshrun::cpu_causal_attention", std::vector<c10::IValue>());
    const torch::Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
    const torch::Tensor mask = mask_in.contiguous();
    const Shape shape(q, k);
    if (mask.dim() != 4 || mask.size(2) != shape.seq || mask.size(3) != shape.keys ||
        mask.scalar_type() != torch::kFloat)
      throw std::logic_error("cpu_causal_attention: the mask must be float [1 or batch, 1, queries, keys], got " +
                             c10::str(mask.sizes()));
    // One [queries, keys] mask for every sequence, or one per sequence.
    const float* mask_data = mask.data_ptr<float>();
    const int64_t mask_stride = mask.size(0) == 1 ? 0 : mask.stride(0);
    int64_t packed = 0;
    const std::vector<Block> blocks = blocks_of(shape.seq, checked_positions(positions, shape), &packed);
    torch::Tensor probabilities = torch::empty({shape.units(), packed}, q.options());
    torch::Tensor out = torch::empty_like(q);
    const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
    float *pp = probabilities.data_ptr<float>(), *op = out.data_ptr<float>();
    const int64_t d = shape.dim;
    at::parallel_for(0, shape.units(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t unit = begin; unit < end; ++unit) {
        const float* query = qp + unit * shape.matrix();
        const float* key = kp + shape.kv_unit(unit) * shape.key_matrix();
        const float* value = vp + shape.kv_unit(unit) * shape.key_matrix();
        float* output = op + unit * shape.matrix();
        for (const Block& b : blocks) {
          float* scores = pp + unit * packed + b.offset;
          gemm(false, true, b.rows, b.keys, d, query + b.first_row * d, d, key, d, 0.0f, scores, b.keys);
          const float* mask_rows = mask_data + unit / shape.heads * mask_stride + b.first_row * shape.keys;
          for (int64_t row = 0; row < b.rows; ++row)
            softmax_row(scores + row * b.keys, mask_rows + row * shape.keys, b.keys);
          gemm(false, false, b.rows, d, b.keys, scores, b.keys, value, d, 0.0f, output + b.first_row * d, d);
        }
      }
    });
    ctx->save_for_backward({q, k, v, probabilities});
    ctx->saved_data["positions"] = positions;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("meshrun::cpu_causal_attention_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &probabilities = saved[3];
    const torch::Tensor grad_out = grads[0].contiguous();
    const Shape shape(q, k);
    const int64_t d = shape.dim, matrix = shape.matrix(), key_matrix = shape.key_matrix();
    const torch::Tensor positions = ctx->saved_data["positions"].toTensor();
    int64_t packed = 0;
    const std::vector<Block> blocks = blocks_of(shape.seq, positions.data_ptr<int64_t>(), &packed);
    torch::Tensor grad_q = torch::empty_like(q);
    // Per query head; summed over each kv head's group below.
    torch::Tensor grad_k = torch::zeros({shape.units(), shape.keys, d}, q.options());
    torch::Tensor grad_v = torch::zeros({shape.units(), shape.keys, d}, q.options());
    const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
    const float *pp = probabilities.data_ptr<float>(), *dop = grad_out.data_ptr<float>();
    float *dqp = grad_q.data_ptr<float>(), *dkp = grad_k.data_ptr<float>(), *dvp = grad_v.data_ptr<float>();
    at::parallel_for(0, shape.units(), 1, [&](int64_t begin, int64_t end) {
      std::vector<float> scratch(static_cast<size_t>(kBlockRows * shape.keys));
      for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t kv_unit = shape.kv_unit(unit);
        const float *query = qp + unit * matrix, *dout = dop + unit * matrix;
        const float *key = kp + kv_unit * key_matrix, *value = vp + kv_unit * key_matrix;
        float *dq = dqp + unit * matrix, *dk = dkp + unit * key_matrix, *dv = dvp + unit * key_matrix;
        for (const Block& b : blocks) {
          const float* p = pp + unit * packed + b.offset;
          float* ds = scratch.data();
          const float* dout_rows = dout + b.first_row * d;
          gemm(false, true, b.rows, b.keys, d, dout_rows, d, value, d, 0.0f, ds, b.keys);  // dP
          gemm(true, false, b.keys, d, b.rows, p, b.keys, dout_rows, d, 1.0f, dv, d);
          for (int64_t row = 0; row < b.rows; ++row) softmax_backward_row(ds + row * b.keys, p + row * b.keys, b.keys);
          gemm(false, false, b.rows, d, b.keys, ds, b.keys, key, d, 0.0f, dq + b.first_row * d, d);
          gemm(true, false, b.keys, d, b.rows, ds, b.keys, query + b.first_row * d, d, 1.0f, dk, d);
        }
      }
    });
    const auto per_kv_head = [&](const torch::Tensor& per_query_head) {
      const int64_t batch = shape.batch, kv_heads = shape.kv_heads, keys = shape.keys;
      if (shape.group() == 1) return per_query_head.view({batch * kv_heads, keys, d});
      return per_query_head.view({batch, kv_heads, shape.group(), keys, d}).sum(2).view({batch * kv_heads, keys, d});
    };
    return {grad_q, per_kv_head(grad_k), per_kv_head(grad_v), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool cpu_causal_attention_applies(const torch::Tensor& q, int64_t batch, int64_t heads) {
  return sgemm_ != nullptr && q.device().is_cpu() && q.scalar_type() == torch::kFloat &&
         batch * heads >= at::get_num_threads();
}

torch::Tensor cpu_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& mask, const torch::Tensor& query_positions) {
  // Autograd functions take defined tensors only: the plain case's
  // positions are written out.
  if (query_positions.defined()) return CpuAttentionFunction::apply(q, k, v, mask, query_positions);
  if (k.size(1) != q.size(2))
    throw std::logic_error("cpu_causal_attention: " + std::to_string(k.size(1)) + " keys for " +
                           std::to_string(q.size(2)) + " queries needs the queries' positions");
  return CpuAttentionFunction::apply(q, k, v, mask, torch::arange(q.size(2), torch::kInt64));
}

PagedDecodeScratch::PagedDecodeScratch(int64_t longest, int64_t group)
    : keys(static_cast<size_t>(longest)), values(static_cast<size_t>(longest)),
      scores(static_cast<size_t>(group * longest)) {}

void paged_decode_unit(float* out, const float* q, int64_t group, const float* mask, const float* key_pool,
                       const float* value_pool, const int64_t* table, int64_t block_size, int64_t kv_heads, int64_t kv,
                       int64_t n, int64_t d, PagedDecodeScratch& scratch) {
  const int64_t slot_stride = kv_heads * d;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t offset = (table[j / block_size] * block_size + j % block_size) * slot_stride + kv * d;
    scratch.keys[static_cast<size_t>(j)] = key_pool + offset;
    scratch.values[static_cast<size_t>(j)] = value_pool + offset;
  }
  if (paged_decode_rows_avx2_applies(d))
    paged_decode_rows_avx2(out, q, group, mask, scratch.keys.data(), scratch.values.data(), n, d, scratch.scores.data());
  else
    paged_decode_rows(out, q, group, mask, scratch.keys.data(), scratch.values.data(), n, d, scratch.scores.data());
}

bool cpu_paged_decode_attention_serves(torch::Device device, torch::Dtype dtype, int64_t new_tokens) {
  return device.is_cpu() && dtype == torch::kFloat && new_tokens == 1;
}

bool cpu_paged_decode_attention_applies(const torch::Tensor& q) {
  return q.dim() == 4 && cpu_paged_decode_attention_serves(q.device(), q.scalar_type(), q.size(2));
}

torch::Tensor cpu_paged_decode_attention(const torch::Tensor& q_in, const torch::Tensor& key_pool,
                                         const torch::Tensor& value_pool, const torch::Tensor& tables_in,
                                         const torch::Tensor& positions_in, const torch::Tensor& mask_in,
                                         int64_t block_size) {
  RECORD_FUNCTION("meshrun::cpu_paged_decode_attention", std::vector<c10::IValue>());
  const torch::Tensor q = q_in.contiguous(), tables = tables_in.contiguous(), positions = positions_in.contiguous();
  const torch::Tensor mask = mask_in.contiguous();
  if (!cpu_paged_decode_attention_applies(q))
    throw std::logic_error("cpu_paged_decode_attention: q must be CPU float [batch, heads, 1, d], got " +
                           c10::str(q.sizes()));
  const int64_t batch = q.size(0), heads = q.size(1), d = q.size(3);
  const auto pool_ok = [&](const torch::Tensor& pool) {
    return pool.device().is_cpu() && pool.scalar_type() == torch::kFloat && pool.is_contiguous() && pool.dim() == 3 &&
           pool.size(2) == d && pool.size(1) > 0 && heads % pool.size(1) == 0 && pool.sizes() == key_pool.sizes();
  };
  if (!pool_ok(key_pool) || !pool_ok(value_pool) || block_size < 1 || key_pool.size(0) % block_size != 0)
    throw std::logic_error("cpu_paged_decode_attention: pools " + c10::str(key_pool.sizes()) + " and " +
                           c10::str(value_pool.sizes()) + " in blocks of " + std::to_string(block_size) +
                           " for q " + c10::str(q.sizes()));
  if (tables.dim() != 2 || tables.size(0) != batch || tables.scalar_type() != torch::kInt64 ||
      !tables.device().is_cpu() || positions.dim() != 1 || positions.size(0) != batch ||
      positions.scalar_type() != torch::kInt64 || !positions.device().is_cpu())
    throw std::logic_error("cpu_paged_decode_attention: tables " + c10::str(tables.sizes()) + " and positions " +
                           c10::str(positions.sizes()) + " must be CPU int64 for " + std::to_string(batch) + " rows");
  if (mask.dim() != 4 || mask.size(0) != batch || mask.size(2) != 1 || mask.scalar_type() != torch::kFloat ||
      !mask.device().is_cpu())
    throw std::logic_error("cpu_paged_decode_attention: the mask must be CPU float [batch, 1, 1, keys], got " +
                           c10::str(mask.sizes()));
  const int64_t kv_heads = key_pool.size(1), group = heads / kv_heads, width = tables.size(1), keys = mask.size(3);
  const int64_t blocks = key_pool.size(0) / block_size;
  const int64_t* table_data = tables.data_ptr<int64_t>();
  const int64_t* position_data = positions.data_ptr<int64_t>();
  int64_t longest = 0;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t n = position_data[b] + 1;
    if (n < 1 || n > keys || n > width * block_size)
      throw std::logic_error("cpu_paged_decode_attention: row " + std::to_string(b) + " at position " +
                             std::to_string(n - 1) + " with " + std::to_string(keys) + " mask columns and " +
                             std::to_string(width * block_size) + " table slots");
    for (int64_t i = 0; i < (n + block_size - 1) / block_size; ++i)
      if (table_data[b * width + i] < 0 || table_data[b * width + i] >= blocks)
        throw std::logic_error("cpu_paged_decode_attention: row " + std::to_string(b) + " names block " +
                               std::to_string(table_data[b * width + i]) + " of a pool of " + std::to_string(blocks));
    longest = std::max(longest, n);
  }
  torch::Tensor out = torch::empty_like(q);
  const float *qp = q.data_ptr<float>(), *kp = key_pool.data_ptr<float>(), *vp = value_pool.data_ptr<float>();
  const float* mp = mask.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, batch * kv_heads, 1, [&](int64_t begin, int64_t end) {
    PagedDecodeScratch scratch(longest, group);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int64_t b = unit / kv_heads, kv = unit % kv_heads;
      // Query heads kv·group .. kv·group + group − 1 are consecutive rows of q.
      const int64_t first = (b * heads + kv * group) * d;
      paged_decode_unit(op + first, qp + first, group, mp + b * keys, kp, vp, table_data + b * width, block_size,
                        kv_heads, kv, position_data[b] + 1, d, scratch);
    }
  });
  return out;
}

}  // namespace meshrun::model_detail
