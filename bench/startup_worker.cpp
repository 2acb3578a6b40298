// bench/startup_worker: one process of a meshrun job, started by
// startup_bench with the local launcher's variables (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, MESHRUN_LAUNCHER=local, ...).
//
//   startup_worker              join the job (detect_launch, Runtime::init),
//                               run one all_reduce of a small tensor on the
//                               world group, print how long each step took
//                               since the driver forked it
//                               (MESHRUN_BENCH_T0_NS, CLOCK_MONOTONIC), the
//                               same steps startup_worker.py does in Python.
//   startup_worker --bandwidth  all_reduce of 1 to 256 MiB of float32 through
//                               Group::all_reduce and through the bare c10d
//                               group under it (Group::native()), alternating
//                               on the same tensor; rank 0 prints the times.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <string>
#include <vector>

#include "meshrun/dist/dist.hpp"
#include "meshrun/launch/env.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace {

std::int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

// Seconds since the driver's start time: the driver and every worker read
// the same clock, so this is launch-to-now, process creation and dynamic
// loading included.
double since_start() {
  const char* start = std::getenv("MESHRUN_BENCH_T0_NS");
  if (!start) throw std::runtime_error("MESHRUN_BENCH_T0_NS is not set: run this under startup_bench");
  return static_cast<double>(monotonic_ns() - std::stoll(start)) / 1e9;
}

double seconds_since(std::int64_t began_ns) { return static_cast<double>(monotonic_ns() - began_ns) / 1e9; }

std::unique_ptr<meshrun::Runtime> join_job() {
  meshrun::LaunchConfig config;
  config.type = "local";
  config.device = "cpu";
  config.backend = "gloo";
  const meshrun::LaunchInfo launch = meshrun::detect_launch(meshrun::ProcessEnvironment(), config, 0, "startup_worker");
  // The defaults a recipe gets (30-minute timeout, so 1 s heartbeats; no job
  // token unless MESHRUN_JOB_TOKEN is set), as `meshrun run` would use them.
  meshrun::DistOptions options;
  options.device = "cpu";
  options.backend = "gloo";
  if (const char* token = std::getenv("MESHRUN_JOB_TOKEN")) options.job_token = token;
  return meshrun::Runtime::init(launch, options);
}

int startup() {
  const double loaded = since_start();
  auto runtime = join_job();
  const double joined = since_start();
  at::Tensor tensor = at::ones({4});
  runtime->world().all_reduce(tensor);
  const double reduced = since_start();
  const int world = runtime->world().size();
  if (!tensor.equal(at::full({4}, static_cast<float>(world)))) {
    std::fprintf(stderr, "all_reduce gave %g, %g, %g, %g; expected %d everywhere\n", tensor[0].item<float>(),
                 tensor[1].item<float>(), tensor[2].item<float>(), tensor[3].item<float>(), world);
    return 1;
  }
  std::printf("startup loaded=%.6f joined=%.6f reduced=%.6f\n", loaded, joined, reduced);
  std::fflush(stdout);
  runtime->shutdown();
  return 0;
}

struct Size {
  std::int64_t bytes;
  int warmup;      // per path, untimed
  int iterations;  // timed, per path
};

// 16 bytes first: there the fixed cost per call, where a wrapper's cost
// would show, is all there is. Fewer iterations for the big sizes: one
// 256 MiB all_reduce takes a few tenths of a second on loopback, and the run
// must stay short on 2 cores.
const Size kSizes[] = {
    {16, 20, 500},           {1LL << 20, 5, 100},    {4LL << 20, 3, 60},
    {16LL << 20, 2, 30},     {64LL << 20, 1, 16},    {256LL << 20, 1, 10},
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

int bandwidth() {
  auto runtime = join_job();
  meshrun::Group& world = runtime->world();
  c10d::ProcessGroup& bare = world.native();
  auto wrapped_all_reduce = [&](at::Tensor& tensor) { world.all_reduce(tensor); };
  // What Group::all_reduce does without meshrun around it: the same c10d
  // call with default options (the group's own timeout).
  auto bare_all_reduce = [&](at::Tensor& tensor) {
    std::vector<at::Tensor> tensors{tensor};
    bare.allreduce(tensors)->wait();
  };
  auto sync = [&] { bare.barrier()->wait(); };

  for (const Size& size : kSizes) {
    at::Tensor tensor = at::empty({size.bytes / static_cast<std::int64_t>(sizeof(float))}, at::kFloat);
    // Each op runs on freshly written values (as gradients would be), and a
    // barrier before it keeps one rank's lag out of the other's time.
    auto timed = [&](auto& all_reduce) {
      tensor.fill_(1.0f);
      sync();
      const std::int64_t began = monotonic_ns();
      all_reduce(tensor);
      return seconds_since(began);
    };
    for (int i = 0; i < size.warmup; ++i) {
      timed(wrapped_all_reduce);
      timed(bare_all_reduce);
    }
    std::vector<double> times;  // wrapped, bare, wrapped, bare, ...
    for (int i = 0; i < size.iterations; ++i) {
      // Alternating which path goes first cancels any effect of order.
      if (i % 2 == 0) {
        times.push_back(timed(wrapped_all_reduce));
        times.push_back(timed(bare_all_reduce));
      } else {
        const double bare_time = timed(bare_all_reduce);
        times.push_back(timed(wrapped_all_reduce));
        times.push_back(bare_time);
      }
    }
    const float expected = static_cast<float>(world.size());
    if (tensor[0].item<float>() != expected || tensor[-1].item<float>() != expected) {
      std::fprintf(stderr, "all_reduce of %lld bytes gave %g, expected %g\n", static_cast<long long>(size.bytes),
                   tensor[0].item<float>(), expected);
      return 1;
    }
    // An op is as slow as its slowest member: every rank's times, then the
    // maximum per op across ranks.
    at::Tensor all = at::tensor(times, at::kDouble);
    std::vector<at::Tensor> slowest{all};
    c10d::AllreduceOptions max_options;
    max_options.reduceOp = c10d::ReduceOp::MAX;
    bare.allreduce(slowest, max_options)->wait();
    if (world.rank() == 0) {
      std::vector<double> wrapped, native, paired;
      for (size_t i = 0; i < times.size(); i += 2) {
        wrapped.push_back(all[static_cast<std::int64_t>(i)].item<double>());
        native.push_back(all[static_cast<std::int64_t>(i + 1)].item<double>());
        // The two ops of one iteration ran back to back, so their ratio is
        // free of the drift (other processes, frequency) between iterations.
        paired.push_back(wrapped.back() / native.back());
      }
      std::printf(
          "bandwidth bytes=%lld iterations=%d wrapped=%.9f bare=%.9f wrapped_min=%.9f bare_min=%.9f paired=%.6f\n",
          static_cast<long long>(size.bytes), size.iterations, median(wrapped), median(native),
          *std::min_element(wrapped.begin(), wrapped.end()), *std::min_element(native.begin(), native.end()),
          median(paired));
      std::fflush(stdout);
    }
  }
  runtime->shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "--bandwidth") == 0) return bandwidth();
    if (argc > 1) {
      std::fprintf(stderr, "usage: %s [--bandwidth] (started by startup_bench)\n", argv[0]);
      return 2;
    }
    return startup();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "startup_worker: %s\n", error.what());
    return 1;
  }
}
