// The environment of a worker as torchrun would set it, for meshrun's local
// launcher to give the workers it starts, so that they detect themselves
// exactly as torchrun's workers do.
#include <string>

#include "launch_internal.hpp"

namespace meshrun {

std::map<std::string, std::string> torchrun_environment_for(int rank, int local_rank,
                                                            int world_size, int local_world_size,
                                                            int node_rank,
                                                            const std::string& master_addr,
                                                            int master_port) {
  using namespace launch_detail;
  // Refuse to hand a worker an environment its own detection would reject:
  // the error is clearer here, in the launcher, than in every worker.
  auto refuse_negative = [](std::string_view name, int value) {
    if (value < 0) {
      throw LaunchEnvError(std::string(name) + "=" + std::to_string(value) + " is negative");
    }
  };
  refuse_negative("rank", rank);
  refuse_negative("local_rank", local_rank);
  refuse_negative("node_rank", node_rank);
  if (world_size < 1 || local_world_size < 1) {
    throw LaunchEnvError("world_size=" + std::to_string(world_size) + " and local_world_size=" +
                         std::to_string(local_world_size) + " must both be at least 1");
  }
  if (world_size % local_world_size != 0) {
    throw LaunchEnvError(
        "world_size=" + std::to_string(world_size) +
        " is not a multiple of local_world_size=" + std::to_string(local_world_size));
  }
  if (master_addr.empty()) throw LaunchEnvError("master_addr is empty");
  if (master_port < 1 || master_port > 65535) {
    throw LaunchEnvError("master_port=" + std::to_string(master_port) +
                         " is not a port number (1-65535)");
  }
  RankLayout layout;
  layout.rank = variable_field("rank", rank);
  layout.local_rank = variable_field("local_rank", local_rank);
  layout.world_size = variable_field("world_size", world_size);
  layout.local_world_size = variable_field("local_world_size", local_world_size);
  layout.node_rank = variable_field("node_rank", node_rank);
  layout.nodes =
      derived_field("nodes", world_size / local_world_size, "world_size / local_world_size");
  layout.first_rank_of_node = node_rank * local_world_size;
  layout.first_rank_how =
      layout.node_rank.description + " × " + layout.local_world_size.description;
  layout.consecutive_ranks_fix = "number ranks node by node";
  check_rank_layout(layout);

  return {
      {"RANK", std::to_string(rank)},
      {"LOCAL_RANK", std::to_string(local_rank)},
      {"WORLD_SIZE", std::to_string(world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(local_world_size)},
      // torchrun's name and the common one; detection reads GROUP_RANK first.
      {"GROUP_RANK", std::to_string(node_rank)},
      {"NODE_RANK", std::to_string(node_rank)},
      {"MASTER_ADDR", master_addr},
      {"MASTER_PORT", std::to_string(master_port)},
  };
}

std::map<std::string, std::string> local_worker_environment_for(int rank, int local_rank,
                                                                int world_size,
                                                                int local_world_size, int node_rank,
                                                                const std::string& master_addr,
                                                                int master_port) {
  std::map<std::string, std::string> environment = torchrun_environment_for(
      rank, local_rank, world_size, local_world_size, node_rank, master_addr, master_port);
  environment.emplace(std::string(kLauncherVariable), "local");
  return environment;
}

}  // namespace meshrun
