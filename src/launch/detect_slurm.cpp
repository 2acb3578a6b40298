// SLURM's variables, as srun sets them for each task of a job step.
//
// Inside srun, SLURM_NODELIST, SLURM_NNODES, SLURM_NTASKS and
// SLURM_TASKS_PER_NODE describe the step, while SLURM_JOB_NODELIST describes
// the whole allocation, which may hold more nodes than the step uses; so
// SLURM_NODELIST is read first, and SLURM_JOB_NODELIST only without it.
#include <array>
#include <charconv>
#include <numeric>
#include <string>

#include "launch_internal.hpp"

namespace meshrun::launch_detail {
namespace {

constexpr std::array<std::string_view, 6> kSlurmRequired = {"SLURM_PROCID", "SLURM_LOCALID",
                                                       "SLURM_NTASKS", "SLURM_NODEID",
                                                       "SLURM_NNODES", "SLURM_TASKS_PER_NODE"};

constexpr std::array<std::string_view, 2> kNodelistVariables = {"SLURM_NODELIST",
                                                                "SLURM_JOB_NODELIST"};

// Without MASTER_PORT, every task of a job must agree on a port without
// talking to each other, and two jobs sharing a node must not collide: the
// job id gives both. The range 10000-29999 lies below Linux's ephemeral
// ports (32768 and up), where outgoing connections would take it.
constexpr unsigned long long kDerivedPortBase = 10000;
constexpr unsigned long long kDerivedPortSpan = 20000;

int port_from_job_id(std::string_view job_id) {
  unsigned long long id = 0;
  auto [end, ec] = std::from_chars(job_id.data(), job_id.data() + job_id.size(), id);
  if (ec != std::errc() || end != job_id.data() + job_id.size()) {
    throw LaunchEnvError(quoted_variable("SLURM_JOB_ID", job_id) +
                         " is not a number, so no master port can be derived from it; set "
                         "MASTER_PORT");
  }
  return static_cast<int>(kDerivedPortBase + id % kDerivedPortSpan);
}

}  // namespace

bool slurm_variables_present(const Environment& environment) {
  return variable_is_set(environment, "SLURM_PROCID");
}

Detection detect_slurm(const Environment& environment, const LaunchConfig& config,
                       std::string_view reason) {
  require_variables(environment, kSlurmRequired, reason);
  std::optional<std::string> master_addr = read_variable(environment, "MASTER_ADDR");
  std::string_view nodelist_variable;
  std::optional<std::string> nodelist;
  for (std::string_view name : kNodelistVariables) {
    if ((nodelist = read_variable(environment, name))) {
      nodelist_variable = name;
      break;
    }
  }
  if (!nodelist && !master_addr) {
    throw LaunchEnvError(std::string(reason) +
                         ", but neither SLURM_NODELIST nor SLURM_JOB_NODELIST is set, so the "
                         "master host is unknown; set MASTER_ADDR");
  }

  RankLayout layout;
  layout.rank = variable_field("SLURM_PROCID", read_non_negative(environment, "SLURM_PROCID"));
  layout.local_rank =
      variable_field("SLURM_LOCALID", read_non_negative(environment, "SLURM_LOCALID"));
  layout.world_size = variable_field("SLURM_NTASKS", read_positive(environment, "SLURM_NTASKS"));
  layout.node_rank = variable_field("SLURM_NODEID", read_non_negative(environment, "SLURM_NODEID"));
  layout.nodes = variable_field("SLURM_NNODES", read_positive(environment, "SLURM_NNODES"));

  const std::string tasks_text = *read_variable(environment, "SLURM_TASKS_PER_NODE");
  const std::string tasks_subject = quoted_variable("SLURM_TASKS_PER_NODE", tasks_text);
  const std::vector<int> tasks_per_node = expand_tasks_per_node(tasks_text, tasks_subject);
  if (static_cast<int>(tasks_per_node.size()) != layout.nodes.value) {
    throw LaunchEnvError(tasks_subject + " lists " + std::to_string(tasks_per_node.size()) +
                         " nodes but " + layout.nodes.description);
  }
  const long long task_sum = std::accumulate(tasks_per_node.begin(), tasks_per_node.end(), 0LL);
  if (task_sum != layout.world_size.value) {
    throw LaunchEnvError(tasks_subject + " adds up to " + std::to_string(task_sum) + " tasks but " +
                         layout.world_size.description);
  }
  // Checked here, before it indexes the task list; check_rank_layout() repeats it.
  if (layout.node_rank.value >= layout.nodes.value) {
    throw LaunchEnvError(layout.node_rank.description + " is not less than " +
                         layout.nodes.description + " (node ids count from 0)");
  }
  const int node = layout.node_rank.value;
  layout.local_world_size = derived_field("tasks on this node", tasks_per_node[node],
                                          "entry " + std::to_string(node) + " of " + tasks_subject +
                                              ", by " + layout.node_rank.description);
  layout.first_rank_of_node =
      std::accumulate(tasks_per_node.begin(), tasks_per_node.begin() + node, 0);
  layout.first_rank_how = "the " + std::to_string(layout.first_rank_of_node) +
                          " tasks on nodes before " + layout.node_rank.description;
  layout.consecutive_ranks_fix = "start the step with srun --distribution=block";
  check_rank_layout(layout);

  Detection detection;
  LaunchInfo& info = detection.info;
  info.launcher = "slurm";
  copy_rank_layout(layout, info);

  if (nodelist) {
    const std::string nodelist_subject = quoted_variable(nodelist_variable, *nodelist);
    info.hosts = expand_hostlist(*nodelist, nodelist_subject);
    if (static_cast<int>(info.hosts.size()) != info.nodes) {
      throw LaunchEnvError(nodelist_subject + " names " + std::to_string(info.hosts.size()) +
                           " hosts but " + layout.nodes.description);
    }
  }
  if (master_addr) {
    info.master_addr = *master_addr;
    info.master_addr_source = "MASTER_ADDR";
  } else {
    // Node 0 holds task 0, since the ranks of a node are consecutive.
    info.master_addr = info.hosts.front();
    info.master_addr_source = "first host of " + std::string(nodelist_variable);
  }

  info.job_id = read_variable(environment, "SLURM_JOB_ID").value_or("");
  if (variable_is_set(environment, "MASTER_PORT") || info.job_id.empty()) {
    set_master_port_from_variable_or_recipe(environment, config, info);
  } else {
    info.master_port = port_from_job_id(info.job_id);
    info.master_port_source = "derived from SLURM_JOB_ID";
  }
  detection.world_size_description = layout.world_size.description + " (from slurm)";
  return detection;
}

}  // namespace meshrun::launch_detail
