// The CUDA kernels of fused_kernels.hpp. Hand-written because LibTorch has
// no fused form of these three (it has fused RMSNorm without the residual
// add, which rms_norm.cpp uses): written as LibTorch ops each is several
// kernels, each a pass over the activations (SwiGLU: silu, mul and three
// backward passes; the rotary: a copy, two muls and two addcmuls; add +
// RMSNorm: the add, then the norm's read). Here each is one pass, fp32
// inside, reading 16 bytes per thread and load where the operands allow.
//
// Compiled by nvcc without LibTorch's headers (fast to build on 2 cores);
// the callers (swiglu.cpp, rope.cpp, rms_norm.cpp) check shapes, dtypes and
// devices and pass the current stream.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "src/model/fused_kernels.hpp"

namespace meshrun::model_detail::fused_cuda {
namespace {

template <typename T>
__device__ __forceinline__ float load_float(T v);
template <>
__device__ __forceinline__ float load_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float load_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float load_float<__half>(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T store_float(float v);
template <>
__device__ __forceinline__ float store_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 store_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half store_float<__half>(float v) { return __float2half_rn(v); }

// The value as the element type holds it (the rounding an eager op's stored
// result gets).
template <typename T>
__device__ __forceinline__ float rounded(float v) { return load_float<T>(store_float<T>(v)); }

// V elements loaded or stored as one 16-byte (or narrower) access.
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load_pack(const T* base, int64_t pack) {
  return reinterpret_cast<const Pack<T, V>*>(base)[pack];
}
template <typename T, int V>
__device__ __forceinline__ void store_pack(T* base, int64_t pack, const Pack<T, V>& p) {
  reinterpret_cast<Pack<T, V>*>(base)[pack] = p;
}

constexpr int kThreads = 256;

const char* launched() {
  const cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

int64_t blocks_for(int64_t work) {
  // A grid-stride loop past this many blocks: enough to fill any current
  // GPU several times over, and within gridDim.x's range.
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return blocks < 1 ? 1 : (blocks > 65536 ? 65536 : blocks);
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// ---- SwiGLU ---------------------------------------------------------------

__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + __expf(-g)); }

template <typename T, int V>
__global__ void swiglu_forward_kernel(const T* gate, const T* up, T* out, int64_t packs) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Pack<T, V> g = load_pack<T, V>(gate, p), u = load_pack<T, V>(up, p);
    Pack<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float gf = load_float(g.v[k]);
      o.v[k] = store_float<T>(gf * sigmoid(gf) * load_float(u.v[k]));
    }
    store_pack<T, V>(out, p, o);
  }
}

template <typename T, int V>
__global__ void swiglu_backward_kernel(const T* grad, const T* gate, const T* up, T* grad_gate, T* grad_up,
                                       int64_t packs) {
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
       p += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const Pack<T, V> d = load_pack<T, V>(grad, p), g = load_pack<T, V>(gate, p), u = load_pack<T, V>(up, p);
    Pack<T, V> dg, du;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float gf = load_float(g.v[k]), df = load_float(d.v[k]);
      const float s = sigmoid(gf);
      du.v[k] = store_float<T>(df * gf * s);
      dg.v[k] = store_float<T>(df * load_float(u.v[k]) * s * (1.0f + gf * (1.0f - s)));
    }
    store_pack<T, V>(grad_gate, p, dg);
    store_pack<T, V>(grad_up, p, du);
  }
}

template <typename T>
const char* swiglu_forward_typed(const void* gate, const void* up, void* out, int64_t n, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const T* g = static_cast<const T*>(gate);
  const T* u = static_cast<const T*>(up);
  T* o = static_cast<T*>(out);
  if (n % V == 0 && aligned16(gate) && aligned16(up) && aligned16(out)) {
    swiglu_forward_kernel<T, V><<<blocks_for(n / V), kThreads, 0, stream>>>(g, u, o, n / V);
  } else {
    swiglu_forward_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(g, u, o, n);
  }
  return launched();
}

template <typename T>
const char* swiglu_backward_typed(const void* grad, const void* gate, const void* up, void* grad_gate, void* grad_up,
                                  int64_t n, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  const T* d = static_cast<const T*>(grad);
  const T* g = static_cast<const T*>(gate);
  const T* u = static_cast<const T*>(up);
  T* dg = static_cast<T*>(grad_gate);
  T* du = static_cast<T*>(grad_up);
  if (n % V == 0 && aligned16(grad) && aligned16(gate) && aligned16(up) && aligned16(grad_gate) &&
      aligned16(grad_up)) {
    swiglu_backward_kernel<T, V><<<blocks_for(n / V), kThreads, 0, stream>>>(d, g, u, dg, du, n / V);
  } else {
    swiglu_backward_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(d, g, u, dg, du, n);
  }
  return launched();
}

// ---- Rotary embedding -----------------------------------------------------

// One thread per rotated pair; the pair index runs fastest, so a warp reads
// and writes consecutive elements of one head.
template <typename T>
__global__ void rotary_kernel(const T* in, HeadsLayout in_layout, T* out, HeadsLayout out_layout, const T* cos,
                              const T* sin, int64_t table_batch_stride, int64_t table_seq_stride, int64_t seq,
                              int64_t heads, int64_t half, float sign, int64_t pairs) {
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < pairs;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = t % half;
    int64_t rest = t / half;
    const int64_t h = rest % heads;
    rest /= heads;
    const int64_t s = rest % seq, b = rest / seq;
    const int64_t from = b * in_layout.batch_stride + s * in_layout.seq_stride + h * in_layout.head_stride + i;
    const int64_t to = b * out_layout.batch_stride + s * out_layout.seq_stride + h * out_layout.head_stride + i;
    const int64_t table = b * table_batch_stride + s * table_seq_stride + i;
    const float x1 = load_float(in[from]), x2 = load_float(in[from + half]);
    const float c = load_float(cos[table]), sn = sign * load_float(sin[table]);
    out[to] = store_float<T>(x1 * c - x2 * sn);
    out[to + half] = store_float<T>(x2 * c + x1 * sn);
  }
}

template <typename T>
const char* rotary_typed(const void* in, HeadsLayout in_layout, void* out, HeadsLayout out_layout, const void* cos,
                         const void* sin, int64_t table_batch_stride, int64_t table_seq_stride, int64_t batch,
                         int64_t seq, int64_t heads, int64_t half, bool inverse, cudaStream_t stream) {
  const int64_t pairs = batch * seq * heads * half;
  if (pairs == 0) return nullptr;
  rotary_kernel<T><<<blocks_for(pairs), kThreads, 0, stream>>>(
      static_cast<const T*>(in), in_layout, static_cast<T*>(out), out_layout, static_cast<const T*>(cos),
      static_cast<const T*>(sin), table_batch_stride, table_seq_stride, seq, heads, half, inverse ? -1.0f : 1.0f,
      pairs);
  return launched();
}

// ---- Residual add + RMSNorm -----------------------------------------------

// The block's sum of `value` (every thread gets it). `scratch` holds one
// float per warp; blockDim.x is a multiple of 32.
__device__ float block_sum(float value, float* scratch) {
  for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // scratch may still be read from the previous call
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float total = 0.0f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

__device__ __forceinline__ float scale_of(float w, bool plus_one) { return plus_one ? w + 1.0f : w; }

// One block per row: sum = x + delta, written, its squares summed; then y.
template <typename T, int V>
__global__ void add_rms_norm_forward_kernel(const T* x, const T* delta, const T* weight, T* sum, T* y,
                                            float* inverse_rms, int64_t n, float eps, bool plus_one) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, packs = n / V;
  const T* xr = x + row * n;
  const T* dr = delta + row * n;
  T* sr = sum + row * n;
  T* yr = y + row * n;
  float squares = 0.0f;
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, V> a = load_pack<T, V>(xr, p), b = load_pack<T, V>(dr, p);
    Pack<T, V> s;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      s.v[k] = store_float<T>(load_float(a.v[k]) + load_float(b.v[k]));
      const float v = load_float(s.v[k]);
      squares += v * v;
    }
    store_pack<T, V>(sr, p, s);
  }
  const float inverse = rsqrtf(block_sum(squares, scratch) / static_cast<float>(n) + eps);
  if (threadIdx.x == 0) inverse_rms[row] = inverse;
  // Each thread reads back the packs it wrote itself.
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
    const Pack<T, V> s = load_pack<T, V>(sr, p), w = load_pack<T, V>(weight, p);
    Pack<T, V> o;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float normalised = load_float(s.v[k]) * inverse;
      const float wf = load_float(w.v[k]);
      o.v[k] = plus_one ? store_float<T>(normalised * (wf + 1.0f)) : store_float<T>(rounded<T>(normalised) * wf);
    }
    store_pack<T, V>(yr, p, o);
  }
}

// A grid of `partials` blocks, each taking rows blockIdx.x, + gridDim.x, ...;
// the weight's gradient for the block's rows accumulates in shared memory
// (each thread owns its columns: no atomics) and lands in its partial row.
// With x̂ = sum / rms and g' = d y × scale: d sum = (g' − x̂ × mean(g' x̂)) /
// rms + d sum from downstream; d weight = Σ d y × x̂ (x̂ rounded first for
// Llama's convention, as its forward multiplies the rounded value).
template <typename T, int V>
__global__ void add_rms_norm_backward_kernel(const T* grad_y, const T* grad_sum, const T* sum, const T* weight,
                                             const float* inverse_rms, T* grad_x, float* weight_partials,
                                             int64_t rows, int64_t n, bool plus_one) {
  extern __shared__ float weight_grad[];  // [n]
  __shared__ float scratch[32];
  const int64_t packs = n / V;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) weight_grad[j] = 0.0f;
  // Columns j of pack p are owned by the thread with p ≡ threadIdx.x, in
  // both loops below and the zeroing above uses another split: sync once.
  __syncthreads();
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* gy = grad_y + row * n;
    const T* sr = sum + row * n;
    const float inverse = inverse_rms[row];
    float projection = 0.0f;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<T, V> g = load_pack<T, V>(gy, p), s = load_pack<T, V>(sr, p), w = load_pack<T, V>(weight, p);
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float normalised = load_float(s.v[k]) * inverse, gf = load_float(g.v[k]);
        projection += gf * scale_of(load_float(w.v[k]), plus_one) * normalised;
        weight_grad[p * V + k] += gf * (plus_one ? normalised : rounded<T>(normalised));
      }
    }
    const float mean = block_sum(projection, scratch) / static_cast<float>(n);
    T* dx = grad_x + row * n;
    const T* gs = grad_sum == nullptr ? nullptr : grad_sum + row * n;
    for (int64_t p = threadIdx.x; p < packs; p += blockDim.x) {
      const Pack<T, V> g = load_pack<T, V>(gy, p), s = load_pack<T, V>(sr, p), w = load_pack<T, V>(weight, p);
      Pack<T, V> downstream;
      if (gs != nullptr) downstream = load_pack<T, V>(gs, p);
      Pack<T, V> o;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float normalised = load_float(s.v[k]) * inverse;
        const float scaled = load_float(g.v[k]) * scale_of(load_float(w.v[k]), plus_one);
        float value = (scaled - normalised * mean) * inverse;
        if (gs != nullptr) value += load_float(downstream.v[k]);
        o.v[k] = store_float<T>(value);
      }
      store_pack<T, V>(dx, p, o);
    }
  }
  for (int64_t p = threadIdx.x; p < packs; p += blockDim.x)
#pragma unroll
    for (int k = 0; k < V; ++k) weight_partials[blockIdx.x * n + p * V + k] = weight_grad[p * V + k];
}

template <typename T, int V>
bool row_packs_fit(int64_t n, std::initializer_list<const void*> pointers) {
  if (n % V != 0) return false;
  for (const void* p : pointers)
    if (p != nullptr && !aligned16(p)) return false;
  return true;
}

// Row kernels: 256 threads, or fewer packs' worth for narrow rows (a
// multiple of 32 for block_sum).
int row_threads(int64_t packs) {
  int64_t threads = (packs + 31) / 32 * 32;
  return static_cast<int>(threads < 32 ? 32 : (threads > kThreads ? kThreads : threads));
}

template <typename T>
const char* add_rms_norm_forward_typed(const void* x, const void* delta, const void* weight, void* sum, void* y,
                                       float* inverse_rms, int64_t rows, int64_t n, float eps, bool plus_one,
                                       cudaStream_t stream) {
  if (rows == 0) return nullptr;
  constexpr int V = 16 / sizeof(T);
  const T *xp = static_cast<const T*>(x), *dp = static_cast<const T*>(delta), *wp = static_cast<const T*>(weight);
  T *sp = static_cast<T*>(sum), *yp = static_cast<T*>(y);
  if (row_packs_fit<T, V>(n, {x, delta, weight, sum, y})) {
    add_rms_norm_forward_kernel<T, V><<<rows, row_threads(n / V), 0, stream>>>(xp, dp, wp, sp, yp, inverse_rms, n,
                                                                                eps, plus_one);
  } else {
    add_rms_norm_forward_kernel<T, 1><<<rows, row_threads(n), 0, stream>>>(xp, dp, wp, sp, yp, inverse_rms, n, eps,
                                                                            plus_one);
  }
  return launched();
}

template <typename T, int V>
const char* add_rms_norm_backward_launch(const void* grad_y, const void* grad_sum, const void* sum, const void* weight,
                                         const float* inverse_rms, void* grad_x, float* weight_partials,
                                         int64_t partials, int64_t rows, int64_t n, bool plus_one,
                                         cudaStream_t stream) {
  const size_t shared = static_cast<size_t>(n) * sizeof(float);
  // Past the default 48 KiB a kernel must opt in to more shared memory.
  if (shared > 48 * 1024) {
    const cudaError_t error = cudaFuncSetAttribute(add_rms_norm_backward_kernel<T, V>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(shared));
    if (error != cudaSuccess) return cudaGetErrorString(error);
  }
  add_rms_norm_backward_kernel<T, V><<<partials, row_threads(n / V), shared, stream>>>(
      static_cast<const T*>(grad_y), static_cast<const T*>(grad_sum), static_cast<const T*>(sum),
      static_cast<const T*>(weight), inverse_rms, static_cast<T*>(grad_x), weight_partials, rows, n, plus_one);
  return launched();
}

template <typename T>
const char* add_rms_norm_backward_typed(const void* grad_y, const void* grad_sum, const void* sum, const void* weight,
                                        const float* inverse_rms, void* grad_x, float* weight_partials,
                                        int64_t partials, int64_t rows, int64_t n, bool plus_one, cudaStream_t stream) {
  constexpr int V = 16 / sizeof(T);
  if (row_packs_fit<T, V>(n, {grad_y, grad_sum, sum, weight, grad_x}))
    return add_rms_norm_backward_launch<T, V>(grad_y, grad_sum, sum, weight, inverse_rms, grad_x, weight_partials,
                                              partials, rows, n, plus_one, stream);
  return add_rms_norm_backward_launch<T, 1>(grad_y, grad_sum, sum, weight, inverse_rms, grad_x, weight_partials,
                                            partials, rows, n, plus_one, stream);
}

}  // namespace

bool built() { return true; }

const char* architectures() { return MESHRUN_CUDA_ARCHITECTURES; }

namespace {

// Calls `typed` with a value of the element type's C++ type (its type is
// what counts): one switch for every launcher.
template <class Typed>
const char* by_element(Element type, Typed typed) {
  switch (type) {
    case Element::f32: return typed(float{});
    case Element::bf16: return typed(__nv_bfloat16{});
    case Element::f16: return typed(__half{});
  }
  return "fused CUDA kernels: unknown element type";
}

}  // namespace

const char* swiglu_forward(Element type, const void* gate, const void* up, void* out, int64_t n, void* stream) {
  return by_element(type, [&](auto zero) {
    return swiglu_forward_typed<decltype(zero)>(gate, up, out, n, static_cast<cudaStream_t>(stream));
  });
}

const char* swiglu_backward(Element type, const void* grad, const void* gate, const void* up, void* grad_gate,
                            void* grad_up, int64_t n, void* stream) {
  return by_element(type, [&](auto zero) {
    return swiglu_backward_typed<decltype(zero)>(grad, gate, up, grad_gate, grad_up, n,
                                                 static_cast<cudaStream_t>(stream));
  });
}

const char* rotary(Element type, const void* in, HeadsLayout in_layout, void* out, HeadsLayout out_layout,
                   const void* cos, const void* sin, int64_t table_batch_stride, int64_t table_seq_stride,
                   int64_t batch, int64_t seq, int64_t heads, int64_t half, bool inverse, void* stream) {
  return by_element(type, [&](auto zero) {
    return rotary_typed<decltype(zero)>(in, in_layout, out, out_layout, cos, sin, table_batch_stride,
                                        table_seq_stride, batch, seq, heads, half, inverse,
                                        static_cast<cudaStream_t>(stream));
  });
}

const char* add_rms_norm_forward(Element type, const void* x, const void* delta, const void* weight, void* sum,
                                 void* y, float* inverse_rms, int64_t rows, int64_t n, float eps, bool plus_one,
                                 void* stream) {
  return by_element(type, [&](auto zero) {
    return add_rms_norm_forward_typed<decltype(zero)>(x, delta, weight, sum, y, inverse_rms, rows, n, eps, plus_one,
                                                      static_cast<cudaStream_t>(stream));
  });
}

int64_t add_rms_norm_partials(int64_t rows, int device) {
  // Four blocks per multiprocessor keep every SM busy while the partials
  // (one fp32 row each) stay few to sum.
  int processors = 0;
  if (cudaDeviceGetAttribute(&processors, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || processors < 1)
    processors = 108;
  const int64_t blocks = 4 * static_cast<int64_t>(processors);
  return rows < blocks ? (rows < 1 ? 1 : rows) : blocks;
}

const char* add_rms_norm_backward(Element type, const void* grad_y, const void* grad_sum, const void* sum,
                                  const void* weight, const float* inverse_rms, void* grad_x,
                                  float* weight_partials, int64_t partials, int64_t rows, int64_t n,
                                  bool plus_one, void* stream) {
  if (rows == 0) return nullptr;
  return by_element(type, [&](auto zero) {
    return add_rms_norm_backward_typed<decltype(zero)>(grad_y, grad_sum, sum, weight, inverse_rms, grad_x,
                                                       weight_partials, partials, rows, n, plus_one,
                                                       static_cast<cudaStream_t>(stream));
  });
}

}  // namespace meshrun::model_detail::fused_cuda
