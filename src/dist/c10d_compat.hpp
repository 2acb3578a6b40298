// The one place that knows which LibTorch meshrun is built against.
//
// LibTorch 1.13 (Debian, what CI builds): c10d::ProcessGroupGloo *is* a
// c10d::ProcessGroup; Gloo has no _allgather_base and no reduce_scatter.
// LibTorch 2.x: ProcessGroupGloo/ProcessGroupNCCL are c10d::Backends that a
// c10d::ProcessGroup dispatches to once setBackend() registered them for a
// device type; the ProcessGroup constructor lost its Options argument in
// later 2.x releases, which is detected from the type, not from a version.
// NCCL exists only when the build defines USE_C10D_NCCL (a CUDA LibTorch);
// CUDA device selection only with MESHRUN_HAVE_CUDA.
//
// Everything else in meshrun calls these functions and never tests versions.
#pragma once

#include <torch/version.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef MESHRUN_HAVE_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include "meshrun/dist.hpp"

namespace meshrun::dist_detail::compat {

using ProcessGroupPtr = c10::intrusive_ptr<c10d::ProcessGroup>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

#ifdef USE_C10D_NCCL
inline constexpr bool kHasNccl = true;
#else
inline constexpr bool kHasNccl = false;
#endif
#ifdef MESHRUN_HAVE_CUDA
inline constexpr bool kHasCuda = true;
#else
inline constexpr bool kHasCuda = false;
#endif

inline std::string torch_version() { return TORCH_VERSION; }

#if TORCH_VERSION_MAJOR >= 2
// Wraps a backend in a ProcessGroup that dispatches `device_type` tensors to it.
template <class PG = c10d::ProcessGroup>
ProcessGroupPtr wrap_backend(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
                             typename PG::BackendType backend_type, c10::DeviceType device_type,
                             c10::intrusive_ptr<c10d::Backend> backend, const std::string& backend_name) {
  c10::intrusive_ptr<PG> group;
  if constexpr (requires { typename PG::Options; }) {
    group = c10::make_intrusive<PG>(store, rank, size,
                                    c10::make_intrusive<typename PG::Options>(backend_name, timeout));
  } else {
    group = c10::make_intrusive<PG>(store, rank, size);
  }
  if constexpr (requires(PG& pg) { pg.setDefaultBackend(backend_type); }) group->setDefaultBackend(backend_type);
  group->setBackend(device_type, backend_type, backend);
  return group;
}
#endif

// A Gloo group whose transport binds `local_address` (the address of the
// interface that reaches the master), with every operation under `timeout`.
inline ProcessGroupPtr make_gloo_group(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
                                       const std::string& local_address) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local_address));
  options->threads = 2;
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
#if TORCH_VERSION_MAJOR >= 2
  return wrap_backend(store, rank, size, timeout, c10d::ProcessGroup::BackendType::GLOO, c10::DeviceType::CPU,
                      gloo, "gloo");
#else
  return gloo;
#endif
}

// Throws DistError naming this build when it has no NCCL.
inline void require_nccl() {
  if (!kHasNccl)
    throw DistError("this meshrun was built without NCCL (LibTorch " + torch_version() +
                    " without USE_C10D_NCCL): use launch.backend = \"gloo\" and launch.device = \"cpu\", or build "
                    "against a CUDA LibTorch with -Dtorch=dir");
}

// An NCCL group on the current CUDA device. Blocking wait is switched on
// (unless the environment already says otherwise) so that a timed-out
// collective throws in the waiting thread, where meshrun can name the ranks
// to blame, instead of the watchdog ending the process.
inline ProcessGroupPtr make_nccl_group([[maybe_unused]] const StorePtr& store, [[maybe_unused]] int rank,
                                       [[maybe_unused]] int size, [[maybe_unused]] std::chrono::milliseconds timeout) {
#ifdef USE_C10D_NCCL
  setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
  setenv("NCCL_BLOCKING_WAIT", "1", 0);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#if TORCH_VERSION_MAJOR >= 2
  return wrap_backend(store, rank, size, timeout, c10d::ProcessGroup::BackendType::NCCL, c10::DeviceType::CUDA,
                      nccl, "nccl");
#else
  return nccl;
#endif
#else
  require_nccl();
  return {};
#endif
}

// Makes `index` the current CUDA device; call before anything touches a GPU.
inline void set_cuda_device([[maybe_unused]] int index) {
#ifdef MESHRUN_HAVE_CUDA
  const int count = static_cast<int>(c10::cuda::device_count());
  if (index >= count)
    throw DistError("local rank " + std::to_string(index) + " has no GPU: this node shows " + std::to_string(count) +
                    " CUDA device(s) (check launch.procs_per_node and CUDA_VISIBLE_DEVICES)");
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  throw DistError("this meshrun was built without CUDA (LibTorch " + torch_version() +
                  "): use launch.device = \"cpu\", or build against a CUDA LibTorch with -Dtorch=dir");
#endif
}

inline c10d::ReduceOp to_c10d(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return c10d::ReduceOp::SUM;
    case ReduceOp::product: return c10d::ReduceOp::PRODUCT;
    case ReduceOp::min: return c10d::ReduceOp::MIN;
    case ReduceOp::max: return c10d::ReduceOp::MAX;
  }
  return c10d::ReduceOp::SUM;
}

// The members' inputs concatenated along dim 0. Gloo lacks _allgather_base
// on 1.13, so it gathers a list and concatenates.
inline at::Tensor all_gather_into_tensor(c10d::ProcessGroup& group, bool is_nccl, const at::Tensor& input,
                                         std::chrono::milliseconds timeout) {
  c10d::AllgatherOptions options;
  options.timeout = timeout;
  std::vector<at::Tensor> inputs{input.contiguous()};
  if (is_nccl) {
    std::vector<int64_t> shape = input.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape[0] *= group.getSize();
    at::Tensor output = at::empty(shape, input.options());
    group._allgather_base(output, inputs[0], options)->wait();
    return output;
  }
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int i = 0; i < group.getSize(); ++i) outputs[0].push_back(at::empty_like(inputs[0]));
  group.allgather(outputs, inputs, options)->wait();
  return at::cat(outputs[0], 0);
}

// This rank's chunk (dim 0 split in group-size parts) of the reduction of
// every member's input. Gloo has no reduce_scatter on 1.13: it all-reduces a
// copy and keeps its chunk, which costs bandwidth but not correctness.
inline at::Tensor reduce_scatter(c10d::ProcessGroup& group, bool is_nccl, const at::Tensor& input, ReduceOp op,
                                 std::chrono::milliseconds timeout) {
  const int64_t size = group.getSize();
  const int64_t chunk = input.size(0) / size;
  c10d::ReduceScatterOptions scatter_options;
  scatter_options.reduceOp = to_c10d(op);
  scatter_options.timeout = timeout;
  if (is_nccl) {
    std::vector<int64_t> shape = input.sizes().vec();
    shape[0] = chunk;
    at::Tensor output = at::empty(shape, input.options());
    at::Tensor contiguous = input.contiguous();
    group._reduce_scatter_base(output, contiguous, scatter_options)->wait();
    return output;
  }
  c10d::AllreduceOptions reduce_options;
  reduce_options.reduceOp = to_c10d(op);
  reduce_options.timeout = timeout;
  std::vector<at::Tensor> tensors{input.clone().contiguous()};
  group.allreduce(tensors, reduce_options)->wait();
  return tensors[0].narrow(0, group.getRank() * chunk, chunk).clone();
}

// Asynchronous forms (Group::*_async). Each returns the started work and,
// where Gloo needs it, `finish`: what to run once the work is done.
inline WorkPtr all_reduce_async(c10d::ProcessGroup& group, at::Tensor& tensor, ReduceOp op,
                                std::chrono::milliseconds timeout) {
  c10d::AllreduceOptions options;
  options.reduceOp = to_c10d(op);
  options.timeout = timeout;
  std::vector<at::Tensor> tensors{tensor};
  return group.allreduce(tensors, options);
}

// Gloo (no reduce_scatter on 1.13): all-reduces `input` in place and copies
// this rank's chunk into `output` when done.
inline WorkPtr reduce_scatter_async(c10d::ProcessGroup& group, bool is_nccl, at::Tensor& input, at::Tensor& output,
                                    ReduceOp op, std::chrono::milliseconds timeout, std::function<void()>& finish) {
  if (is_nccl) {
    c10d::ReduceScatterOptions options;
    options.reduceOp = to_c10d(op);
    options.timeout = timeout;
    return group._reduce_scatter_base(output, input, options);
  }
  const int64_t chunk = input.size(0) / group.getSize();
  finish = [input, output, chunk, rank = group.getRank()]() mutable {
    output.copy_(input.narrow(0, rank * chunk, chunk));
  };
  return all_reduce_async(group, input, op, timeout);
}

// Gloo gathers into separate tensors, which may be views of `output`: it
// receives into its own buffer and copies out, so `input` may alias them.
inline WorkPtr all_gather_into_tensor_async(c10d::ProcessGroup& group, bool is_nccl, at::Tensor& output,
                                            const at::Tensor& input, std::chrono::milliseconds timeout) {
  c10d::AllgatherOptions options;
  options.timeout = timeout;
  if (is_nccl) {
    at::Tensor source = input;
    return group._allgather_base(output, source, options);
  }
  std::vector<at::Tensor> inputs{input.is_alias_of(output) ? input.clone() : input.contiguous()};
  std::vector<std::vector<at::Tensor>> outputs{output.chunk(group.getSize(), 0)};
  return group.allgather(outputs, inputs, options);
}

}  // namespace meshrun::dist_detail::compat
