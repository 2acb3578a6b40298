// The variables mpirun/mpiexec sets: Open MPI's OMPI_COMM_WORLD_*, MVAPICH's
// MV2_COMM_WORLD_*, and the PMI_* / MPI_LOCAL* pair that MPICH's and Intel
// MPI's Hydra launcher sets.
//
// None of them names the node: Open MPI's OMPI_COMM_WORLD_NODE_RANK is not
// the node's index but this process's rank among all processes on the node
// across every job, so it is not read. The node is derived as rank / local
// size, which holds when every node runs the same number of processes and
// the ranks of a node are consecutive (mpirun's default --map-by slot); the
// layout check rejects round-robin placement, where rank % local size differs
// from the local rank.
//
// Nor do they name a master host: without MASTER_ADDR, rank 0's address has
// to be broadcast over MPI itself (needs_mpi_bootstrap).
#include <array>
#include <string>

#include "launch_internal.hpp"

namespace meshrun::launch_detail {
namespace {

struct MpiVariables {
  std::string_view implementation;  // LaunchInfo::mpi_implementation
  std::string_view display_name;
  std::array<std::string_view, 4> names;  // rank, local rank, size, local size
  std::string_view consecutive_ranks_fix;
};

constexpr MpiVariables kOpenMpi = {
    "openmpi",
    "Open MPI",
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    "start with mpirun --map-by slot (or ppr:N:node) rather than --map-by node"};
constexpr MpiVariables kMvapich = {"mvapich",
                                   "MVAPICH",
                                   {"MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK",
                                    "MV2_COMM_WORLD_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE"},
                                   "place each node's ranks consecutively (block placement)"};
constexpr MpiVariables kPmi = {"pmi",
                               "MPICH/Intel MPI",
                               {"PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE", "MPI_LOCALNRANKS"},
                               "place each node's ranks consecutively (e.g. mpiexec -ppn N)"};

const MpiVariables& variables_of(MpiImplementation implementation) {
  switch (implementation) {
    case MpiImplementation::openmpi:
      return kOpenMpi;
    case MpiImplementation::mvapich:
      return kMvapich;
    case MpiImplementation::pmi:
      break;
  }
  return kPmi;
}

// The rank or the size alone marks an implementation as present.
bool marked(const Environment& environment, const MpiVariables& variables) {
  return variable_is_set(environment, variables.names[0]) ||
         variable_is_set(environment, variables.names[2]);
}

}  // namespace

void check_mpi_agrees(const Environment& environment, const LaunchInfo& info, std::string_view rank_name,
                      std::string_view size_name, std::string_view hint) {
  std::optional<MpiImplementation> mpi = present_mpi_implementation(environment);
  if (!mpi) return;
  const auto names = mpi_variable_names(*mpi);
  const std::array<std::pair<std::string_view, int>, 2> mpi_fields = {std::pair{names[0], info.rank},
                                                                      std::pair{names[2], info.world_size}};
  const std::array<std::string_view, 2> other_names = {rank_name, size_name};
  for (std::size_t i = 0; i < mpi_fields.size(); ++i) {
    std::optional<std::string> value = read_variable(environment, mpi_fields[i].first);
    if (!value || *value == std::to_string(mpi_fields[i].second)) continue;
    throw LaunchEnvError(quoted_variable(other_names[i], std::to_string(mpi_fields[i].second)) + " and " +
                         quoted_variable(mpi_fields[i].first, *value) +
                         " disagree: this process cannot be both; unset the variables of the launcher that did not "
                         "start it" + std::string(hint));
  }
}

std::array<std::string_view, 4> mpi_variable_names(MpiImplementation implementation) {
  return variables_of(implementation).names;
}

std::optional<MpiImplementation> present_mpi_implementation(const Environment& environment) {
  if (marked(environment, kOpenMpi)) return MpiImplementation::openmpi;
  if (marked(environment, kMvapich)) return MpiImplementation::mvapich;
  if (marked(environment, kPmi)) return MpiImplementation::pmi;
  return std::nullopt;
}

Detection detect_mpi(const Environment& environment, const LaunchConfig& config,
                     MpiImplementation implementation, std::string_view reason) {
  const MpiVariables& variables = variables_of(implementation);
  const auto [rank_name, local_rank_name, size_name, local_size_name] = variables.names;
  require_variables(environment, variables.names, reason);

  RankLayout layout =
      read_uniform_rank_layout(environment, rank_name, local_rank_name, size_name, local_size_name);
  const int local_size = layout.local_world_size.value;
  const std::string rank_ratio = std::string(rank_name) + " / " + std::string(local_size_name);
  layout.node_rank = derived_field("node rank", layout.rank.value / local_size, rank_ratio);
  layout.first_rank_of_node = layout.node_rank.value * local_size;
  layout.first_rank_how =
      layout.node_rank.description + " × " + layout.local_world_size.description;
  layout.consecutive_ranks_fix = std::string(variables.consecutive_ranks_fix);
  check_rank_layout(layout);

  Detection detection;
  LaunchInfo& info = detection.info;
  info.launcher = "mpi";
  info.mpi_implementation = std::string(variables.implementation);
  copy_rank_layout(layout, info);
  if (std::optional<std::string> master_addr = read_variable(environment, "MASTER_ADDR")) {
    info.master_addr = *master_addr;
    info.master_addr_source = "MASTER_ADDR";
  } else {
    info.needs_mpi_bootstrap = true;
    info.master_addr_source = "rank 0's address, broadcast over MPI at startup";
  }
  set_master_port_from_variable_or_recipe(environment, config, info);
  detection.world_size_description =
      layout.world_size.description + " (from mpi, " + std::string(variables.display_name) + ")";
  return detection;
}

}  // namespace meshrun::launch_detail
