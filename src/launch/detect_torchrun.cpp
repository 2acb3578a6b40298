// torchrun's variables, which meshrun's own local launcher also sets for its
// workers (with MESHRUN_LAUNCHER=local). torchrun gives every node the same
// number of workers and numbers ranks node by node, so the node count is
// WORLD_SIZE / LOCAL_WORLD_SIZE and a node's ranks are consecutive.
#include <array>
#include <string>

#include "launch_internal.hpp"

namespace meshrun::launch_detail {
namespace {

constexpr std::array<std::string_view, 6> kTorchrunRequired = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"};

}  // namespace

bool torchrun_variables_present(const Environment& environment) {
  return variable_is_set(environment, "RANK") || variable_is_set(environment, "WORLD_SIZE");
}

bool local_launcher_marked(const Environment& environment) {
  return read_variable(environment, kLauncherVariable) == "local";
}

bool ray_launcher_marked(const Environment& environment) {
  return read_variable(environment, kLauncherVariable) == "ray";
}

Detection detect_torchrun(const Environment& environment, std::string_view launcher,
                          std::string_view reason) {
  // torchrun always sets MASTER_PORT, so the recipe's port is no fallback here.
  require_variables(environment, kTorchrunRequired, reason);

  RankLayout layout =
      read_uniform_rank_layout(environment, "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE");
  const int local_world_size = layout.local_world_size.value;

  // torchrun sets GROUP_RANK; other torchrun-style launchers (accelerate,
  // hand-written scripts) often set NODE_RANK or neither.
  if (variable_is_set(environment, "GROUP_RANK")) {
    layout.node_rank = variable_field("GROUP_RANK", read_non_negative(environment, "GROUP_RANK"));
  } else if (variable_is_set(environment, "NODE_RANK")) {
    layout.node_rank = variable_field("NODE_RANK", read_non_negative(environment, "NODE_RANK"));
  } else {
    layout.node_rank =
        derived_field("node rank", layout.rank.value / local_world_size, "RANK / LOCAL_WORLD_SIZE");
  }
  layout.first_rank_of_node = layout.node_rank.value * local_world_size;
  layout.first_rank_how =
      layout.node_rank.description + " × " + layout.local_world_size.description;
  layout.consecutive_ranks_fix =
      "let torchrun number the ranks, with the same --nproc-per-node on every node";
  check_rank_layout(layout);

  Detection detection;
  LaunchInfo& info = detection.info;
  info.launcher = std::string(launcher);
  copy_rank_layout(layout, info);
  info.master_addr = *read_variable(environment, "MASTER_ADDR");
  info.master_addr_source = "MASTER_ADDR";
  info.master_port = parse_port("MASTER_PORT", *read_variable(environment, "MASTER_PORT"));
  info.master_port_source = "MASTER_PORT";
  const bool ray = launcher == "ray";
  info.job_id = read_variable(environment, ray ? kRayJobVariable : "TORCHELASTIC_RUN_ID").value_or("");
  detection.world_size_description =
      layout.world_size.description + (launcher == "local" ? " (from meshrun's local launcher)"
                                       : ray              ? " (from meshrun's Ray job)"
                                                          : " (from torchrun)");
  return detection;
}

}  // namespace meshrun::launch_detail
