// `meshrun submit --ray` and `meshrun plan --ray` without a cluster: the
// node list Ray prints, the fit verdict, the address rule, and the submit
// command with its base64 job spec (decoded here as ray_job.py decodes it).
#include <doctest/doctest.h>

#include <nettle/base64.h>

#include <nlohmann/json.hpp>

#include "meshrun/launch/launcher.hpp"
#include "meshrun/launch/ray.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {
namespace {

ClusterShape ray_cluster_shape(int nodes, int procs_per_node, DeviceKind device) {
  ClusterShape shape;
  shape.nodes = nodes;
  shape.procs_per_node = procs_per_node;
  shape.device = device;
  return shape;
}

RayNode ray_node(double cpus, double gpus, bool alive = true) {
  RayNode node;
  node.alive = alive;
  node.cpus = cpus;
  node.gpus = gpus;
  return node;
}

std::string decode_base64(const std::string& text) {
  base64_decode_ctx context;
  base64_decode_init(&context);
  std::string out(BASE64_DECODE_LENGTH(text.size()), '\0');
  std::size_t length = out.size();
  REQUIRE(base64_decode_update(&context, &length, reinterpret_cast<uint8_t*>(out.data()), text.size(), text.c_str()));
  REQUIRE(base64_decode_final(&context));
  out.resize(length);
  return out;
}

TEST_CASE("Ray's node list: alive nodes with their CPUs and GPUs") {
  const auto nodes = parse_ray_nodes(R"([
    {"node_id": "a1", "node_ip": "127.0.0.1", "state": "ALIVE",
     "resources_total": {"CPU": 2.0, "memory": "16.173 GiB", "node:127.0.0.1": 1.0}},
    {"node_id": "b2", "node_ip": "10.0.0.2", "state": "DEAD", "resources_total": {"CPU": 8, "GPU": 4}},
    {"node_id": "c3", "node_ip": "10.0.0.3", "state": "ALIVE", "resources_total": {"CPU": 16, "GPU": 8.0}}])");
  REQUIRE(nodes.size() == 3);
  CHECK(nodes[0].id == "a1");
  CHECK(nodes[0].ip == "127.0.0.1");
  CHECK(nodes[0].alive);
  CHECK(nodes[0].cpus == 2);
  CHECK(nodes[0].gpus == 0);
  CHECK_FALSE(nodes[1].alive);
  CHECK(nodes[2].gpus == 8);
  CHECK(parse_ray_nodes("[]").empty());
  CHECK_THROWS_WITH_AS(parse_ray_nodes("Error: Failed to connect"),
                       doctest::Contains("`ray list nodes` did not print a JSON array of nodes"), LaunchError);
  CHECK_THROWS_AS(parse_ray_nodes("[1]"), LaunchError);
}

TEST_CASE("a plan fits a Ray cluster when each node's bundles fit one Ray node") {
  const std::string address = "http://127.0.0.1:8265";
  RayFit fit = ray_cluster_fit(ray_cluster_shape(1, 2, DeviceKind::cpu), {ray_node(2, 0)}, address);
  CHECK(fit.fits);
  CHECK(fit.text ==
        "the Ray cluster at http://127.0.0.1:8265 has 1 alive node (CPU 2); the job needs 2 bundles of {CPU: 1}: "
        "1 node × 2, each node's bundles on one Ray node: it fits");

  fit = ray_cluster_fit(ray_cluster_shape(1, 4, DeviceKind::cpu), {ray_node(2, 0), ray_node(16, 0, false)}, address);
  CHECK_FALSE(fit.fits);
  CHECK(fit.text ==
        "the Ray cluster at http://127.0.0.1:8265 has 1 alive node (CPU 2); the job needs 4 bundles of {CPU: 1}: "
        "1 node × 4, each node's bundles on one Ray node: room for 0 of 1 node, short by 2 CPUs");

  // Enough CPUs in all, but no node holds a whole node's bundles.
  fit = ray_cluster_fit(ray_cluster_shape(1, 4, DeviceKind::cpu), {ray_node(2, 0), ray_node(3, 0)}, address);
  CHECK_FALSE(fit.fits);
  CHECK(fit.text.ends_with("the bundles are there but not together: the largest node holds 3 of a node's 4"));

  // On cuda a bundle is a GPU with a CPU: GPUs bound it.
  fit = ray_cluster_fit(ray_cluster_shape(2, 8, DeviceKind::cuda), {ray_node(64, 8), ray_node(64, 8)}, address);
  CHECK(fit.fits);
  fit = ray_cluster_fit(ray_cluster_shape(2, 8, DeviceKind::cuda), {ray_node(64, 8), ray_node(64, 4)}, address);
  CHECK_FALSE(fit.fits);
  CHECK(fit.text.find("(CPU 128, GPU 12)") != std::string::npos);
  CHECK(fit.text.ends_with("room for 1 of 2 nodes, short by 4 bundles (each a GPU with a CPU)"));
  CHECK_FALSE(ray_cluster_fit(ray_cluster_shape(1, 1, DeviceKind::cpu), {}, address).fits);
}

TEST_CASE("the Ray address: --address, then launch.address, then RAY_ADDRESS, each an http address") {
  Recipe recipe;
  MapEnvironment environment({{"RAY_ADDRESS", "http://env:8265"}});
  CHECK(resolve_ray_address("", recipe, environment) == "http://env:8265");
  recipe.launch.address = "https://recipe:443";
  CHECK(resolve_ray_address("", recipe, environment) == "https://recipe:443");
  CHECK(resolve_ray_address("http://option:1", recipe, environment) == "http://option:1");
  CHECK_THROWS_WITH_AS(resolve_ray_address("127.0.0.1:6379", recipe, environment),
                       "--address 127.0.0.1:6379 is not a Ray job server's address (http://host:port, the "
                       "dashboard's)",
                       ConfigError);
  recipe.launch.address.clear();
  CHECK_THROWS_WITH_AS(resolve_ray_address("", recipe, MapEnvironment({{"RAY_ADDRESS", "auto"}})),
                       doctest::Contains("RAY_ADDRESS='auto' is not a Ray job server's address"), ConfigError);
  CHECK_THROWS_WITH_AS(resolve_ray_address("", recipe, MapEnvironment()),
                       doctest::Contains("no Ray cluster to submit to: pass --address"), ConfigError);
}

TEST_CASE("the ray job submit command carries the workers' command line as base64 JSON") {
  Recipe recipe;
  recipe.name = "sft tiny";
  recipe.launch.type = "local";
  recipe.launch.procs_per_node = 2;
  recipe.launch.max_restarts = 1;
  recipe.launch.restart_delay = 0.5;
  recipe.launch.timeout_minutes = 2;
  Plan plan;
  plan.cluster = ray_cluster_shape(1, 2, DeviceKind::cpu);
  RayJobOptions options;
  options.meshrun_binary = "/shared/bin/meshrun";
  options.recipe_path = "/shared/recipes/sft tiny.toml";
  options.entrypoint = "/shared/share/meshrun/ray_job.py";
  options.address = "http://head:8265";
  options.sets = {"data.path=\"it's $HOME\""};
  const auto command = make_ray_submit_command(recipe, plan, options);
  REQUIRE(command.size() == 11);
  CHECK(std::vector<std::string>(command.begin(), command.begin() + 10) ==
        std::vector<std::string>{"ray", "job", "submit", "--address", "http://head:8265", "--", "python3",
                                 "/shared/share/meshrun/ray_job.py", "run", "--spec"});
  CHECK(command[10].find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") ==
        std::string::npos);
  const auto spec = nlohmann::json::parse(decode_base64(command[10]));
  CHECK(spec["nodes"] == 1);
  CHECK(spec["procs_per_node"] == 2);
  CHECK(spec["device"] == "cpu");
  CHECK(spec["master_port"] == 29500);
  CHECK(spec["max_restarts"] == 1);
  CHECK(spec["restart_delay"] == 0.5);
  CHECK(spec["placement_timeout"] == 120);
  CHECK_FALSE(spec.contains("cwd"));
  CHECK(spec["argv"] == std::vector<std::string>{"/shared/bin/meshrun", "--log-level", "info", "run",
                                                  "/shared/recipes/sft tiny.toml", "--set",
                                                  "data.path=\"it's $HOME\"", "--set", "launch.type=ray"});

  // The plan's cluster wins over the recipe's [launch], as in the batch script.
  plan.cluster = ray_cluster_shape(2, 4, DeviceKind::cpu);
  recipe.launch.type = "auto";
  options.working_directory = "/shared/work";
  const auto other = nlohmann::json::parse(decode_base64(make_ray_submit_command(recipe, plan, options)[10]));
  CHECK(other["cwd"] == "/shared/work");
  CHECK(other["argv"] == std::vector<std::string>{"/shared/bin/meshrun", "--log-level", "info", "run",
                                                   "/shared/recipes/sft tiny.toml", "--set",
                                                   "data.path=\"it's $HOME\"", "--set", "launch.nodes=2", "--set",
                                                   "launch.procs_per_node=4"});

  const std::string script = make_ray_submit_script(recipe, plan, options);
  CHECK(script.starts_with("#!/usr/bin/env bash\n"));
  CHECK(script.find("# Placement: 2 nodes × 4 bundles ({CPU: 1} each), each node's on one Ray node.\n") !=
        std::string::npos);
  CHECK(script.find("# Every worker runs: /shared/bin/meshrun --log-level info run '/shared/recipes/sft tiny.toml'") !=
        std::string::npos);
  CHECK(script.find("\nexec ray job submit --address http://head:8265 -- python3 /shared/share/meshrun/ray_job.py "
                    "run --spec ") != std::string::npos);

  options.entrypoint = "/home/me/my meshrun/ray_job.py";
  CHECK_THROWS_WITH_AS(make_ray_submit_command(recipe, plan, options),
                       doctest::Contains("the Ray entrypoint '/home/me/my meshrun/ray_job.py' cannot go through "
                                         "`ray job submit` unquoted"),
                       ConfigError);
}

}  // namespace
}  // namespace meshrun
