// The runtime and the helpers in a single process: with no Runtime (a world
// of one by convention) and with a real Runtime whose world is one process.
#include "torch_doctest.hpp"


#include <string>

#include "meshrun/dist/dist.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {
namespace {

using namespace std::chrono_literals;

LaunchInfo single_process() {
  LaunchInfo launch;
  launch.launcher = "single";
  launch.master_addr = "127.0.0.1";
  launch.master_port = 29500;  // unused: a world of one takes any free port
  return launch;
}

DistOptions quick_options() {
  DistOptions options;
  options.timeout = 5s;
  options.seed = 11;
  return options;
}

TEST_CASE("without a runtime, the helpers behave as a world of one") {
  REQUIRE(Runtime::current() == nullptr);
  CHECK_FALSE(dist::is_distributed());
  CHECK(dist::rank() == 0);
  CHECK(dist::world_size() == 1);
  CHECK(dist::local_rank() == 0);
  CHECK(dist::local_world_size() == 1);
  CHECK(dist::num_nodes() == 1);
  CHECK(dist::fs_local_rank() == 0);
  dist::barrier();
  CHECK(dist::all_reduce_value(7) == 7);
  CHECK(dist::all_reduce_value(2.5, ReduceOp::max) == 2.5);
  CHECK(dist::synchronize_value(std::string("same")) == "same");
  CHECK(dist::synchronize_value(41) == 41);
  CHECK(dist::synchronize_flag(true));
  CHECK(dist::broadcast_object("bytes") == "bytes");
  CHECK(dist::all_gather_object("me") == std::vector<std::string>{"me"});
  const auto gathered = dist::all_gather(torch::arange(3));
  REQUIRE(gathered.size() == 1);
  CHECK(torch::equal(gathered[0], torch::arange(3)));
  int calls = 0;
  CHECK(dist::do_n_at_a_time([&] { return ++calls; }) == 1);
  dist::do_n_at_a_time([&] { ++calls; }, 4);
  CHECK(calls == 2);
}

TEST_CASE("a runtime of one process runs real collectives and the helpers") {
  auto runtime = Runtime::init(single_process(), quick_options());
  CHECK(Runtime::current() == runtime.get());
  CHECK(dist::is_distributed());
  CHECK(runtime->job_prefix() == "meshrun/127.0.0.1:29500");
  CHECK(runtime->options().backend == "gloo");
  Group& world = runtime->world();
  CHECK(world.name() == "world");
  CHECK(world.ranks() == std::vector<int>{0});
  CHECK(world.device() == "cpu");

  at::Tensor value = torch::tensor({1.0, 2.0});
  world.all_reduce(value, ReduceOp::sum);
  CHECK(torch::equal(value, torch::tensor({1.0, 2.0})));
  world.broadcast(value, 0);
  CHECK(torch::equal(world.all_gather_into_tensor(torch::arange(4)), torch::arange(4)));
  CHECK(torch::equal(world.reduce_scatter(torch::arange(4)), torch::arange(4)));
  CHECK_THROWS_AS(world.broadcast(value, 1), DistError);

  CHECK(dist::all_reduce_value(3, ReduceOp::min) == 3);
  CHECK(dist::synchronize_value(std::string("")) == "");
  CHECK(dist::broadcast_object(std::string("\0binary\xff", 8)) == std::string("\0binary\xff", 8));
  CHECK(dist::all_gather_object("") == std::vector<std::string>{""});
  CHECK(dist::fs_local_rank() == 0);
  CHECK(runtime->shared_filesystem());

  CHECK_THROWS_WITH_AS(Runtime::init(single_process(), quick_options()),
                       "a meshrun runtime is already running in this process: shut it down first", DistError);

  Group kept = world;
  runtime->shutdown();
  CHECK(Runtime::current() == nullptr);
  CHECK_THROWS_WITH_AS(kept.barrier(), "group world was closed when its runtime shut down", DistError);
}

TEST_CASE("init seeds torch with the recipe seed on every rank") {
  auto runtime = Runtime::init(single_process(), quick_options());
  const at::Tensor drawn = torch::rand({3});
  torch::manual_seed(11);
  CHECK(torch::equal(drawn, torch::rand({3})));
}

TEST_CASE("data seeds differ per data-parallel rank and are stable") {
  CHECK(data_seed(42, 0) == data_seed(42, 0));
  CHECK(data_seed(42, 0) != data_seed(42, 1));
  CHECK(data_seed(42, 1) != data_seed(43, 0));
  CHECK(data_seed(42, 3) < (std::uint64_t{1} << 63));
}

TEST_CASE("build groups and self-check a plan on a world of one") {
  Diagnostics diagnostics;
  auto recipe = load_recipe_text(
      "algorithm = \"sft\"\n[launch]\nprocs_per_node = 1\ndevice = \"cpu\"\nbackend = \"gloo\"\n"
      "timeout_minutes = 0.1\n[roles.actor]\nmodel = \"builtin:tiny\"\ndtype = \"fp32\"\n",
      "one.toml", {}, diagnostics);
  REQUIRE_MESSAGE(recipe, diagnostics.format());
  const Plan plan = make_plan(*recipe, ClusterShape::from_recipe(*recipe), diagnostics);
  const SelfCheckReport report = self_check(*recipe, plan, single_process(), MapEnvironment());
  REQUIRE(report.groups.size() == 5);  // world, actor, actor/dp, actor/sp, actor/tp
  CHECK(report.groups[0].name == "world");
  CHECK(report.groups[1].name == "actor");
  CHECK(report.groups[2].name == "actor/dp");
  CHECK(report.groups[4].passed == std::vector<std::string>{"barrier", "all_reduce", "all_gather", "broadcast"});
  const std::string text = format_self_check_report(report);
  CHECK(text.find("world of 1 on cpu with gloo") == 0);
  CHECK(text.find("5 groups checked, all passed") != std::string::npos);
  CHECK(Runtime::current() == nullptr);
}

TEST_CASE("runtime groups of a plan: meshes for every role, groups where this rank is") {
  auto runtime = Runtime::init(single_process(), quick_options());
  Plan plan;
  RolePlan actor;
  actor.name = "actor";
  actor.mesh.ranks = {0};
  actor.mesh.dp_groups = actor.mesh.sp_groups = actor.mesh.tp_groups = {{0}};
  RolePlan critic;  // placed on ranks this world lacks: known, not joined
  critic.role = Role::critic;
  critic.name = "critic";
  critic.mesh.ranks = {1};
  critic.mesh.dp_groups = critic.mesh.sp_groups = critic.mesh.tp_groups = {{1}};
  plan.roles = {actor, critic};
  EnginePlan engine;
  engine.index = 0;
  engine.ranks = {0};
  plan.engines = {engine};
  runtime->build_groups(plan);
  CHECK(runtime->meshes().size() == 2);
  CHECK(runtime->mesh(Role::actor).group(MeshAxis::tp).name() == "actor/tp");
  CHECK_FALSE(runtime->mesh(Role::critic).holds_this_rank());
  CHECK_THROWS_AS(runtime->mesh(Role::reward), DistError);
  REQUIRE(runtime->engine_group(0));
  CHECK(runtime->engine_group(0)->name() == "engine 0/tp");
  CHECK(runtime->engine_group(1) == nullptr);
  CHECK(runtime->groups().size() == 6);  // world, actor + 3 axes, engine 0
  CHECK_THROWS_AS(runtime->build_groups(plan), DistError);
}

TEST_CASE("options come from the recipe and the environment") {
  Recipe recipe;
  recipe.launch.device = "cpu";
  recipe.launch.backend = "auto";
  recipe.launch.timeout_minutes = 0.5;
  recipe.seed = 9;
  recipe.checkpoint.path = "/tmp/ckpt";
  LaunchInfo launch = single_process();
  MapEnvironment environment{{"MESHRUN_JOB_ID", "env-job"}, {"MESHRUN_JOB_TOKEN", "t"}, {"MESHRUN_SHARED_FS", "0"}};
  DistOptions options = dist_options_from(recipe, launch, environment);
  CHECK(options.timeout == 30s);
  CHECK(options.seed == 9);
  CHECK(options.job_id == "env-job");
  CHECK(options.job_token == "t");
  CHECK(options.shared_filesystem == std::optional<bool>(false));
  CHECK(options.shared_fs_probe_path == "/tmp/ckpt");
  launch.job_id = "slurm-7";
  CHECK(dist_options_from(recipe, launch, environment).job_id == "slurm-7");
  environment.set("MESHRUN_SHARED_FS", "maybe");
  CHECK_THROWS_WITH_AS(dist_options_from(recipe, launch, environment),
                       "MESHRUN_SHARED_FS='maybe': use 1 (all nodes share one filesystem) or 0", DistError);
}

TEST_CASE("asking for what this build lacks is a clear error") {
  DistOptions options = quick_options();
  options.device = "cuda";
  options.backend = "nccl";
  if (!build_has_nccl()) {
    const std::string error = [&] {
      try {
        Runtime::init(single_process(), options);
      } catch (const DistError& e) {
        return std::string(e.what());
      }
      return std::string();
    }();
    CHECK(error.find("built without NCCL (LibTorch ") != std::string::npos);
  }
  options.device = "cpu";
  CHECK_THROWS_WITH_AS(Runtime::init(single_process(), options),
                       "the nccl backend needs launch.device = \"cuda\"; use gloo on cpu", DistError);
  LaunchInfo launch = single_process();
  launch.master_port = 0;
  CHECK_THROWS_WITH_AS(Runtime::init(launch, quick_options()),
                       "malformed master port 0 (MASTER_PORT): a TCP port is between 1 and 65535", DistError);
  CHECK(Runtime::current() == nullptr);
}

}  // namespace
}  // namespace meshrun
