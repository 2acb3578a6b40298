// Helpers shared by the launch tests: environments as each launcher sets
// them, and the message of the LaunchEnvError a call throws.
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <string>

#include "meshrun/launch/env.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun::launch_test {

// The message of the LaunchEnvError that `action` throws. Any other outcome
// fails the test (and returns "", which no message check matches).
template <class Action>
std::string launch_error(Action&& action) {
  try {
    action();
  } catch (const LaunchEnvError& error) {
    return error.what();
  } catch (const std::exception& error) {
    FAIL_CHECK("expected LaunchEnvError, got another exception: " << error.what());
    return "";
  }
  FAIL_CHECK("expected LaunchEnvError, but nothing was thrown");
  return "";
}

// A worker's environment as torchrun_environment_for() and
// local_worker_environment_for() return it.
inline MapEnvironment environment_of(const std::map<std::string, std::string>& variables) {
  return MapEnvironment({variables.begin(), variables.end()});
}

inline LaunchConfig launch_config(std::string type, int nodes = 1, int procs_per_node = 1,
                                  int master_port = 29500) {
  LaunchConfig config;
  config.type = std::move(type);
  config.nodes = nodes;
  config.procs_per_node = procs_per_node;
  config.master_port = master_port;
  return config;
}

// What torchrun sets for one worker.
inline MapEnvironment torchrun_environment(int rank, int local_rank, int world_size,
                                           int local_world_size, int group_rank) {
  return MapEnvironment({{"RANK", std::to_string(rank)},
                         {"LOCAL_RANK", std::to_string(local_rank)},
                         {"WORLD_SIZE", std::to_string(world_size)},
                         {"LOCAL_WORLD_SIZE", std::to_string(local_world_size)},
                         {"GROUP_RANK", std::to_string(group_rank)},
                         {"MASTER_ADDR", "10.1.2.3"},
                         {"MASTER_PORT", "29400"},
                         {"TORCHELASTIC_RUN_ID", "run-7"}});
}

// What srun sets for one task of a block-distributed step.
inline MapEnvironment slurm_environment(int procid, int localid, int ntasks, int nodeid, int nnodes,
                                        std::string tasks_per_node, std::string nodelist,
                                        std::string job_id = "4242") {
  MapEnvironment environment({{"SLURM_PROCID", std::to_string(procid)},
                              {"SLURM_LOCALID", std::to_string(localid)},
                              {"SLURM_NTASKS", std::to_string(ntasks)},
                              {"SLURM_NODEID", std::to_string(nodeid)},
                              {"SLURM_NNODES", std::to_string(nnodes)},
                              {"SLURM_TASKS_PER_NODE", std::move(tasks_per_node)},
                              {"SLURM_NODELIST", nodelist},
                              {"SLURM_JOB_NODELIST", nodelist}});
  if (!job_id.empty()) environment.set("SLURM_JOB_ID", std::move(job_id));
  return environment;
}

// What Open MPI's mpirun sets for one process.
inline MapEnvironment openmpi_environment(int rank, int local_rank, int size, int local_size) {
  return MapEnvironment({{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
                         {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)}});
}

}  // namespace meshrun::launch_test
