// One rank of the actor → engine weight-sync test (tests/rl/sync_test.cpp
// starts three):
//
//   ppo_sync_worker RANK PORT TIMEOUT_MS
//
// The plan puts the actor on rank 0 and one rollout engine, tensor parallel
// 2, on ranks 1 and 2 (nothing shared, so the weights travel by broadcast).
// The actor takes one optimizer step; the engine starts from other weights.
// Every rank prints "rank R before B after A": the largest difference
// between the engine's logits (gathered over its tp group) and the actor's
// on a probe batch, before and after send_weights_to_engines. Exit status 0,
// or 1 with "error: MESSAGE".
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>

#include "meshrun/dist/dist.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/train/train_engine.hpp"

#include "../../support/loopback_launch.hpp"
#include "src/rl/rl_internal.hpp"

// Named, not anonymous: the test programs compile as one unity build.
namespace ppo_sync_worker_code {

using namespace meshrun;

constexpr const char* kRecipe = R"(
algorithm = "ppo"
[launch]
type = "local"
procs_per_node = 3
device = "cpu"
backend = "gloo"
[batch]
micro_train = 1
train = 2
micro_rollout = 1
rollout = 2
[roles.actor]
model = "builtin:tiny"
dtype = "fp32"
procs_per_node = 1
[rollout]
engines = 1
tensor_parallel = 2
max_prompt_len = 8
max_new_tokens = 8
)";

int run(int rank, int port, int timeout_ms) {
  Diagnostics diagnostics;
  const auto recipe = load_recipe_text(kRecipe, "sync.toml", {}, diagnostics);
  if (!recipe) throw std::runtime_error("recipe: " + diagnostics.format());
  const Plan plan = make_plan(*recipe, ClusterShape::from_recipe(*recipe), diagnostics);
  DistOptions options;
  options.timeout = std::chrono::milliseconds(timeout_ms);
  auto runtime = Runtime::init(test::loopback_launch(rank, 3, port), options);
  runtime->build_groups(plan);
  Group& world = runtime->world();

  const torch::Tensor probe = torch::tensor({1, 7, 42, 99, 3, 250}, torch::kInt64).view({2, 3});
  std::optional<TrainEngine> actor_engine;
  std::optional<LlamaModel> actor, engine;
  NamedTensors full;
  ppo_detail::ParameterShapes shapes;
  ModelOptions model_options;
  model_options.config = *builtin_model_config("builtin:tiny");
  {
    ModelOptions skeleton_options = model_options;
    skeleton_options.initialize = false;
    const LlamaModel skeleton(skeleton_options);
    for (const auto& spec : skeleton->parameter_specs()) shapes.emplace_back(spec.name, spec.full_shape);
  }
  if (rank == 0) {
    torch::manual_seed(1);
    actor = LlamaModel(model_options);
    EngineOptions engine_options;
    engine_options.schedule = LrSchedule::make(LrScheduleKind::constant, 0.01, 1, 0, 1);
    actor_engine.emplace(*actor, runtime->mesh(Role::actor), engine_options);
    const torch::Tensor logits = actor_engine->forward({probe, {}, {}, {}});
    actor_engine->backward(vocab_parallel_cross_entropy(logits, probe, nullptr).mean());
    actor_engine->step();
    full = actor_engine->gather_full_parameters();
  } else {
    Group* tp = runtime->engine_group(0);
    if (!tp || tp->size() != 2) throw std::runtime_error("rank " + std::to_string(rank) + " has no engine tp group of 2");
    model_options.tensor_parallel = tp;
    torch::manual_seed(2);
    engine = LlamaModel(model_options);
  }

  // The actor's logits to everyone; the engine's gathered over its tp group.
  auto difference = [&]() {
    torch::NoGradGuard no_grad;
    torch::Tensor reference = rank == 0 ? (*actor)->forward({probe, {}, {}, {}}).contiguous()
                                        : torch::empty({2, 3, model_options.config.vocab});
    world.broadcast(reference, 0);
    double worst = 0;
    if (rank != 0) {
      Group* tp = runtime->engine_group(0);
      const torch::Tensor shard = (*engine)->forward({probe, {}, {}, {}});
      const torch::Tensor logits = torch::cat(tp->all_gather(shard.contiguous()), 2);
      worst = (logits - reference).abs().max().item<double>();
    }
    return dist::all_reduce_value(worst, ReduceOp::max, &world);
  };
  const double before = difference();
  std::vector<LlamaModel*> engines;
  if (engine) engines.push_back(&*engine);
  ppo_detail::send_weights_to_engines(full, shapes, false, 0, engines, world);
  const double after = difference();
  std::cout << "rank " << rank << " before " << before << " after " << after << std::endl;
  runtime->shutdown();
  return 0;
}

int run(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: ppo_sync_worker RANK PORT TIMEOUT_MS\n";
    return 2;
  }
  try {
    torch::set_num_threads(1);
    return run(std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]));
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace ppo_sync_worker_code

// The program's main (tests/support/worker_main.cpp).
int ppo_sync_worker_main(int argc, char** argv) { return ppo_sync_worker_code::run(argc, argv); }
