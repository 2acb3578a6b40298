// One rank of a test job, in a process of its own, for the multi-process
// tests in tests/dist/multiprocess_test.cpp.
//
//   dist_worker SCENARIO RANK WORLD PORT TIMEOUT_MS
//
// Every rank runs on 127.0.0.1 with MASTER_PORT = PORT; MESHRUN_JOB_TOKEN and
// MESHRUN_JOB_ID come from the environment. Scenarios:
//   check    the self-check of an SFT recipe for WORLD cpu ranks (mesh tp=2
//            when WORLD is a multiple of 4); rank 0 prints the report
//   loop     all_reduce on the world group forever (role groups of an SFT
//            plan built first), printing "ready" after the first; the test
//            kills or stops a rank and watches the others fail
//   busy     loop, but the last rank stops calling collectives after the
//            first, alive and beating: it is busy elsewhere
//   deaf     loop, but the last rank's heartbeat stops after the first
//            while it goes on with the collectives
//   helpers  the OLMo-style helpers on a world faked as two nodes
// Exit status 0 on success; 1 with "error: MESSAGE" on stderr otherwise.
#include <numeric>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "meshrun/dist/dist.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "src/dist/runtime_state.hpp"

#include "../../support/loopback_launch.hpp"

// Named, not anonymous: the test programs compile as one unity build.
namespace dist_worker_code {

using namespace meshrun;

Recipe test_recipe(int world, int timeout_ms) {
  const int tp = world % 4 == 0 ? 2 : 1;
  const std::string text = "name = \"dist-test\"\nalgorithm = \"sft\"\nseed = 5\n"
                           "[launch]\ntype = \"local\"\nnodes = 1\nprocs_per_node = " + std::to_string(world) +
                           "\ndevice = \"cpu\"\nbackend = \"gloo\"\ntimeout_minutes = " +
                           std::to_string(timeout_ms / 60000.0) +
                           "\n[mesh]\ntp = " + std::to_string(tp) +
                           "\n[batch]\nmicro_train = 1\ntrain = " + std::to_string(2 * world) +
                           "\n[roles.actor]\nmodel = \"builtin:tiny\"\ndtype = \"fp32\"\n";
  Diagnostics diagnostics;
  auto recipe = load_recipe_text(text, "dist-test.toml", {}, diagnostics);
  if (!recipe || diagnostics.has_errors()) throw std::runtime_error("test recipe: " + diagnostics.format());
  return *recipe;
}

int run_check(int rank, int world, int port, int timeout_ms) {
  const Recipe recipe = test_recipe(world, timeout_ms);
  Diagnostics diagnostics;
  const Plan plan = make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics);
  if (diagnostics.has_errors()) throw std::runtime_error("test plan: " + diagnostics.format());
  const SelfCheckReport report =
      self_check(recipe, plan, test::loopback_launch(rank, world, port, 1), ProcessEnvironment());
  if (rank == 0) std::cout << format_self_check_report(report);
  std::cout << "rank " << rank << " ok" << std::endl;
  return 0;
}

DistOptions options_for(int timeout_ms) {
  DistOptions options;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  options.job_token = ProcessEnvironment().get("MESHRUN_JOB_TOKEN").value_or("");
  options.job_id = ProcessEnvironment().get("MESHRUN_JOB_ID").value_or("");
  return options;
}

int run_loop(const std::string& scenario, int rank, int world, int port, int timeout_ms) {
  auto runtime = Runtime::init(test::loopback_launch(rank, world, port, 1), options_for(timeout_ms));
  const Recipe recipe = test_recipe(world, timeout_ms);
  Diagnostics diagnostics;
  runtime->build_groups(make_plan(recipe, ClusterShape::from_recipe(recipe), diagnostics));
  const bool odd_one = rank == world - 1;
  for (long iteration = 0;; ++iteration) {
    at::Tensor value = at::ones({4});
    runtime->world().all_reduce(value);
    if (value[0].item<float>() != static_cast<float>(world)) throw DistError("wrong all_reduce result");
    if (iteration == 0) {
      // Two heartbeats, so that every rank's record names its role.
      std::this_thread::sleep_for(std::chrono::milliseconds(std::clamp(timeout_ms / 5, 200, 2000)));
      std::cout << "ready " << rank << std::endl;
      if (odd_one && scenario == "deaf") runtime->state().heartbeat->stop();
    }
    if (odd_one && scenario == "busy") std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

int run_helpers(int rank, int world, int port, int timeout_ms) {
  DistOptions options = options_for(timeout_ms);
  options.shared_fs_probe_path = std::filesystem::temp_directory_path() / "meshrun-dist-test" / "checkpoints";
  auto runtime = Runtime::init(test::loopback_launch(rank, world, port, 2), options);
  const auto sum = dist::all_reduce_value(rank + 1);
  const auto largest = dist::all_reduce_value(static_cast<double>(rank) / 2, ReduceOp::max);
  const auto from_zero = dist::synchronize_value(std::string("from rank ") + std::to_string(rank));
  const bool flag = dist::synchronize_flag(rank == 0);
  const auto names = dist::all_gather_object(std::string(static_cast<size_t>(rank) + 1, 'x'));
  const int turn = dist::do_n_at_a_time([&] { return dist::rank(); }, 1);
  // all_to_all: rank r sends r + p rows to rank p (none from 0 to 0), each
  // row [r, p, i]; rank p receives them in sender order.
  std::vector<int64_t> send, receive;
  std::vector<at::Tensor> outgoing;
  for (int p = 0; p < world; ++p) {
    send.push_back(rank + p);
    receive.push_back(p + rank);
    for (int i = 0; i < rank + p; ++i) outgoing.push_back(torch::tensor({rank, p, i}, torch::kFloat32).view({1, 3}));
  }
  const at::Tensor sent = outgoing.empty() ? torch::zeros({0, 3}) : torch::cat(outgoing);
  const at::Tensor arrived = runtime->world().all_to_all(sent, send, receive);
  bool routed = arrived.size(0) == std::accumulate(receive.begin(), receive.end(), int64_t{0});
  int64_t row = 0;
  for (int from = 0; from < world && routed; ++from)
    for (int i = 0; i < from + rank; ++i, ++row)
      routed = arrived[row][0].item<float>() == from && arrived[row][1].item<float>() == rank &&
               arrived[row][2].item<float>() == i;
  std::cout << "rank " << rank << " sum " << sum << " max " << largest << " sync '" << from_zero << "' flag " << flag
            << " gathered";
  for (const auto& name : names) std::cout << ' ' << name;
  std::cout << " turn " << turn << " nodes " << dist::num_nodes() << " local_rank " << dist::local_rank()
            << " fs_local_rank " << dist::fs_local_rank() << " all_to_all " << (routed ? "routed" : "wrong")
            << std::endl;
  return 0;
}

int run(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: dist_worker check|loop|busy|deaf|helpers RANK WORLD PORT TIMEOUT_MS\n";
    return 2;
  }
  const std::string scenario = argv[1];
  const int rank = std::atoi(argv[2]), world = std::atoi(argv[3]), port = std::atoi(argv[4]);
  const int timeout_ms = std::atoi(argv[5]);
  try {
    if (scenario == "check") return run_check(rank, world, port, timeout_ms);
    if (scenario == "loop" || scenario == "busy" || scenario == "deaf")
      return run_loop(scenario, rank, world, port, timeout_ms);
    if (scenario == "helpers") return run_helpers(rank, world, port, timeout_ms);
    std::cerr << "unknown scenario " << scenario << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace dist_worker_code

// The program's main (tests/support/worker_main.cpp).
int dist_worker_main(int argc, char** argv) { return dist_worker_code::run(argc, argv); }
