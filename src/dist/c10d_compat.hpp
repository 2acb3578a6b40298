// The one place that knows how the LibTorch 2.x meshrun is built against
// differs from other 2.x releases, and whether it has CUDA and NCCL.
//
// ProcessGroupGloo / ProcessGroupNCCL are c10d::Backends that a
// c10d::ProcessGroup dispatches to once setBackend() registered them for a
// device type; the ProcessGroup constructor lost its Options argument during
// 2.x, which is detected from the type, not from a version number. NCCL
// exists only when the build defines USE_C10D_NCCL (a CUDA torch); CUDA
// device selection only with MESHRUN_HAVE_CUDA.
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
#include <nccl.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif
#ifdef MESHRUN_HAVE_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include "meshrun/dist/dist.hpp"

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

// "13.0": the CUDA runtime this build compiled against; "" without CUDA.
inline std::string cuda_version() {
#ifdef MESHRUN_HAVE_CUDA
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
#else
  return "";
#endif
}

// "2.28.9": the NCCL this build compiled against; "" without NCCL.
inline std::string nccl_version() {
#ifdef USE_C10D_NCCL
  return std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
#else
  return "";
#endif
}

// The total memory of CUDA device `index` in bytes (a property query: it
// creates no context); 0 without CUDA.
inline int64_t device_total_memory([[maybe_unused]] int index) {
#ifdef MESHRUN_HAVE_CUDA
  const cudaDeviceProp* properties = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index));
  return properties ? static_cast<int64_t>(properties->totalGlobalMem) : 0;
#else
  return 0;
#endif
}

// CUDA devices this process sees (0 without a driver or without CUDA).
inline int visible_gpus() {
#ifdef MESHRUN_HAVE_CUDA
  return static_cast<int>(c10::cuda::device_count());
#else
  return 0;
#endif
}

static_assert(TORCH_VERSION_MAJOR == 2, "meshrun builds against torch 2.x (scripts/torch_config.py)");

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

// A Gloo group whose transport binds `local_address` (the address of the
// interface that reaches the master), with every operation under `timeout`.
inline ProcessGroupPtr make_gloo_group(const StorePtr& store, int rank, int size, std::chrono::milliseconds timeout,
                                       const std::string& local_address) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(local_address));
  options->threads = 2;
  auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  ProcessGroupPtr group = wrap_backend(store, rank, size, timeout, c10d::ProcessGroup::BackendType::GLOO,
                                       c10::DeviceType::CPU, gloo, "gloo");
#ifdef MESHRUN_HAVE_CUDA
  // Gloo takes CUDA tensors too (its CUDA work stages them through host
  // memory), as Python's init_process_group("gloo") registers it: a cuda job
  // on backend gloo, or ranks sharing one GPU, which NCCL refuses.
  group->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, gloo);
#endif
  return group;
}

// Throws DistError naming this build when it has no NCCL.
inline void require_nccl() {
  if (!kHasNccl)
    throw DistError("this meshrun was built without NCCL (torch " + torch_version() +
                    " without CUDA): use launch.backend = \"gloo\" and launch.device = \"cpu\", or build "
                    "against a CUDA torch (the PyPI wheel; -Dtorch_python=PYTHON)");
}

// An NCCL group on the current CUDA device. Blocking wait is switched on
// (unless the environment already says otherwise) so that a timed-out
// collective throws in the waiting thread, where meshrun can name the ranks
// to blame, instead of the watchdog ending the process; async error handling
// in its clean-up-only mode lets the watchdog abort a failed or timed-out
// communicator (so no kernel stays stuck on it) without tearing the process
// down before meshrun has explained the failure.
inline ProcessGroupPtr make_nccl_group([[maybe_unused]] const StorePtr& store, [[maybe_unused]] int rank,
                                       [[maybe_unused]] int size, [[maybe_unused]] std::chrono::milliseconds timeout) {
#ifdef USE_C10D_NCCL
  setenv("TORCH_NCCL_BLOCKING_WAIT", "1", 0);
  setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "2", 0);
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
  return wrap_backend(store, rank, size, timeout, c10d::ProcessGroup::BackendType::NCCL, c10::DeviceType::CUDA,
                      nccl, "nccl");
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
  throw DistError("this meshrun was built without CUDA (torch " + torch_version() +
                  "): use launch.device = \"cpu\", or build against a CUDA torch (-Dtorch_python=PYTHON)");
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

}  // namespace meshrun::dist_detail::compat
