// What a Ray cluster holds, as `ray list nodes` reports it through the job
// server (the dashboard's state API), and whether a plan's bundles fit it.
// The `ray` command is the client: the state API's JSON is Ray's to change,
// its command line is what Ray keeps stable for users.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

#include "meshrun/launch/launcher.hpp"
#include "meshrun/launch/ray.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "launch_internal.hpp"
#include "supervisor.hpp"

namespace meshrun {
namespace {

// A node's resource count: Ray writes CPU and GPU as numbers (memory as
// "16.2 GiB" strings, which are not read).
double resource(const nlohmann::json& resources, const char* name) {
  if (!resources.is_object()) return 0;
  auto it = resources.find(name);
  if (it == resources.end() || !it->is_number()) return 0;
  const double value = it->get<double>();
  return std::isfinite(value) && value > 0 ? value : 0;
}

std::string count_text(double value) { return fmt::format("{:g}", value); }

// Bundles of one process slot each (ray.hpp), as Ray prints resources.
std::string bundle_text(bool cuda) { return cuda ? "{CPU: 1, GPU: 1}" : "{CPU: 1}"; }

// How many bundles a node can hold.
long long bundles_on(const RayNode& node, bool cuda) {
  const double slots = cuda ? std::min(node.cpus, node.gpus) : node.cpus;
  return static_cast<long long>(std::floor(slots + 1e-9));
}

}  // namespace

std::vector<RayNode> parse_ray_nodes(const std::string& json) {
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!parsed.is_array()) {
    throw LaunchError("`ray list nodes` did not print a JSON array of nodes: '" +
                      json.substr(0, std::min<std::size_t>(json.size(), 200)) + "'");
  }
  std::vector<RayNode> nodes;
  for (const auto& entry : parsed) {
    if (!entry.is_object()) throw LaunchError("`ray list nodes` printed a node that is not a JSON object");
    RayNode node;
    node.id = entry.value("node_id", std::string());
    node.ip = entry.value("node_ip", std::string());
    node.alive = entry.value("state", std::string()) == "ALIVE";
    const nlohmann::json resources = entry.value("resources_total", nlohmann::json::object());
    node.cpus = resource(resources, "CPU");
    node.gpus = resource(resources, "GPU");
    nodes.push_back(std::move(node));
  }
  return nodes;
}

RayFit ray_cluster_fit(const ClusterShape& cluster, const std::vector<RayNode>& nodes, const std::string& address) {
  const bool cuda = cluster.device == DeviceKind::cuda;
  long long alive = 0, groups = 0, bundles = 0, largest = 0;
  double cpus = 0, gpus = 0;
  for (const RayNode& node : nodes) {
    if (!node.alive) continue;
    ++alive;
    cpus += node.cpus;
    gpus += node.gpus;
    const long long on_node = bundles_on(node, cuda);
    bundles += on_node;
    largest = std::max(largest, on_node);
    groups += on_node / cluster.procs_per_node;
  }
  const long long needed = static_cast<long long>(cluster.nodes) * cluster.procs_per_node;
  RayFit fit;
  fit.fits = groups >= cluster.nodes;
  std::string cluster_text = fmt::format("the Ray cluster at {} has {} alive node{} (CPU {}{})", address, alive,
                                         alive == 1 ? "" : "s", count_text(cpus),
                                         cuda || gpus > 0 ? ", GPU " + count_text(gpus) : "");
  const std::string job_text =
      fmt::format("the job needs {} bundle{} of {}: {} node{} × {}, each node's bundles on one Ray node", needed,
                  needed == 1 ? "" : "s", bundle_text(cuda), cluster.nodes, cluster.nodes == 1 ? "" : "s",
                  cluster.procs_per_node);
  if (fit.fits) {
    fit.text = fmt::format("{}; {}: it fits", cluster_text, job_text);
    return fit;
  }
  std::string shortfall;
  if (bundles < needed) {
    const long long missing = needed - bundles;
    shortfall = cuda ? fmt::format("short by {} bundle{} (each a GPU with a CPU)", missing, missing == 1 ? "" : "s")
                     : fmt::format("short by {} CPU{}", missing, missing == 1 ? "" : "s");
  } else {
    shortfall = fmt::format("the bundles are there but not together: the largest node holds {} of a node's {}",
                            largest, cluster.procs_per_node);
  }
  fit.text = fmt::format("{}; {}: room for {} of {} node{}, {}", cluster_text, job_text, groups, cluster.nodes,
                         cluster.nodes == 1 ? "" : "s", shortfall);
  return fit;
}

std::string resolve_ray_address(const std::string& option, const Recipe& recipe, const Environment& environment) {
  std::string address, source;
  if (!option.empty()) {
    address = option, source = "--address " + option;
  } else if (!recipe.launch.address.empty()) {
    address = recipe.launch.address, source = "launch.address = \"" + address + "\"";
  } else if (std::optional<std::string> variable = launch_detail::read_variable(environment, "RAY_ADDRESS")) {
    address = *variable, source = launch_detail::quoted_variable("RAY_ADDRESS", address);
  } else {
    throw ConfigError(
        "no Ray cluster to submit to: pass --address http://HEAD:8265, set launch.address, or set RAY_ADDRESS",
        "launch.address");
  }
  const bool http = address.starts_with("http://") || address.starts_with("https://");
  const bool blank = address.find_first_of(" \t\r\n", 0) != std::string::npos || address.ends_with("://");
  if (!http || blank || address.find('\0') != std::string::npos) {
    throw ConfigError(source + " is not a Ray job server's address (http://host:port, the dashboard's)",
                      "launch.address");
  }
  return address;
}

std::vector<RayNode> query_ray_nodes(const std::string& address, double timeout_seconds) {
  using launch_detail::capture_command;
  // 10000: the most the state API returns by default; no cluster has more nodes.
  const launch_detail::CapturedCommand run = capture_command(
      {"ray", "list", "nodes", "--address", address, "--format", "json", "--detail", "--limit", "10000", "--timeout",
       fmt::format("{}", std::max(1, static_cast<int>(timeout_seconds)))},
      "ray list nodes", timeout_seconds + 10);
  if (run.exit_code == 127)
    throw LaunchError(run.error + ": install Ray's command line (pip install 'ray[default]') where you submit from");
  if (!run.error.empty()) {
    // Ray's own message is the explanation (a refused connection, a wrong
    // address); its last lines are the ones that say so.
    std::string said = run.err.empty() ? run.out : run.err;
    if (said.size() > 2000) said = "..." + said.substr(said.size() - 2000);
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    throw LaunchError(fmt::format("asking the Ray cluster at {} for its nodes failed: {}{}", address, run.error,
                                  said.empty() ? "" : ":\n" + said));
  }
  return parse_ray_nodes(run.out);
}

RayFit fit_on_ray_cluster(const ClusterShape& cluster, const std::string& address) {
  return ray_cluster_fit(cluster, query_ray_nodes(address), address);
}

}  // namespace meshrun
