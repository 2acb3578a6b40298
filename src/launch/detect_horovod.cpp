// horovodrun's variables. With its Gloo controller (horovodrun --gloo, and
// the default without MPI) horovodrun starts every process itself and sets
// HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE,
// HOROVOD_CROSS_RANK (the host's index), HOROVOD_CROSS_SIZE (hosts),
// HOROVOD_HOSTNAME, and HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT with
// HOROVOD_CONTROLLER=gloo. With its MPI controller it runs mpirun, sets none
// of its own, and the processes carry the MPI implementation's variables.
//
// horovodrun fills each host's slots before the next (-H a:4,b:4 puts ranks
// 0-3 on a), so ranks of a host are consecutive; meshrun also needs every
// host to run the same number of processes, which the layout check enforces.
//
// The Gloo rendezvous address is horovodrun's own HTTP key-value server on
// the host that ran horovodrun, not rank 0's: the c10d store needs rank 0's
// host, so a job on several hosts takes it from MASTER_ADDR (horovodrun
// passes its environment on to every process); on one host it is 127.0.0.1.
#include <array>
#include <string>

#include "launch_internal.hpp"

namespace meshrun::launch_detail {
namespace {

constexpr std::array<std::string_view, 5> kHorovodGlooRequired = {
    "HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK"};

constexpr std::string_view kRendezvousAddr = "HOROVOD_GLOO_RENDEZVOUS_ADDR";
constexpr std::string_view kRendezvousPort = "HOROVOD_GLOO_RENDEZVOUS_PORT";
constexpr std::string_view kController = "HOROVOD_CONTROLLER";

bool gloo_variables_present(const Environment& environment) {
  return variable_is_set(environment, "HOROVOD_RANK") || variable_is_set(environment, "HOROVOD_SIZE") ||
         variable_is_set(environment, kRendezvousAddr) || variable_is_set(environment, kRendezvousPort);
}

// HOROVOD_CONTROLLER, when set, is "gloo" or "mpi" and agrees with the
// variables that are present.
void check_controller(const Environment& environment, bool gloo_present) {
  std::optional<std::string> controller = read_variable(environment, kController);
  if (!controller) return;
  if (*controller != "gloo" && *controller != "mpi") {
    throw LaunchEnvError(quoted_variable(kController, *controller) + " is neither 'gloo' nor 'mpi'");
  }
  if (*controller == "mpi" && gloo_present) {
    throw LaunchEnvError(quoted_variable(kController, *controller) +
                         " names the MPI controller, but Horovod's Gloo variables are set too (" +
                         quoted_variable("HOROVOD_RANK", read_variable(environment, "HOROVOD_RANK").value_or("")) +
                         "): the environment mixes two horovodrun jobs");
  }
}

// The rendezvous pair comes together from horovodrun; one without the other
// is a hand-made environment that lost a line.
void check_rendezvous_pair(const Environment& environment) {
  const bool addr = variable_is_set(environment, kRendezvousAddr);
  const bool port = variable_is_set(environment, kRendezvousPort);
  if (addr == port) {
    if (port) parse_port(kRendezvousPort, *read_variable(environment, kRendezvousPort));
    return;
  }
  const std::string_view set = addr ? kRendezvousAddr : kRendezvousPort;
  const std::string_view unset = addr ? kRendezvousPort : kRendezvousAddr;
  throw LaunchEnvError(quoted_variable(set, *read_variable(environment, set)) + " is set but " +
                       std::string(unset) + " is not: horovodrun sets both");
}

// Gloo variables beside an MPI job's must describe the same process.
void check_against_mpi(const Environment& environment, const LaunchInfo& info) {
  check_mpi_agrees(environment, info, "HOROVOD_RANK", "HOROVOD_SIZE", "");
}

Detection detect_horovod_gloo(const Environment& environment, const LaunchConfig& config,
                              std::string_view reason) {
  require_variables(environment, kHorovodGlooRequired, reason);
  check_rendezvous_pair(environment);
  RankLayout layout = read_uniform_rank_layout(environment, "HOROVOD_RANK", "HOROVOD_LOCAL_RANK", "HOROVOD_SIZE",
                                               "HOROVOD_LOCAL_SIZE");
  layout.node_rank = variable_field("HOROVOD_CROSS_RANK", read_non_negative(environment, "HOROVOD_CROSS_RANK"));
  if (variable_is_set(environment, "HOROVOD_CROSS_SIZE")) {
    const int cross_size = read_positive(environment, "HOROVOD_CROSS_SIZE");
    if (cross_size != layout.nodes.value) {
      throw LaunchEnvError(quoted_variable("HOROVOD_CROSS_SIZE", std::to_string(cross_size)) + " disagrees with " +
                           layout.nodes.description + ": every host must run the same number of processes (horovodrun -H a:4,b:4)");
    }
  }
  const int local_size = layout.local_world_size.value;
  layout.first_rank_of_node = layout.node_rank.value * local_size;
  layout.first_rank_how = layout.node_rank.description + " × " + layout.local_world_size.description;
  layout.consecutive_ranks_fix = "give every host the same number of slots (horovodrun -H a:4,b:4)";
  check_rank_layout(layout);

  Detection detection;
  LaunchInfo& info = detection.info;
  info.launcher = "horovod";
  copy_rank_layout(layout, info);
  check_against_mpi(environment, info);
  if (std::optional<std::string> master_addr = read_variable(environment, "MASTER_ADDR")) {
    info.master_addr = *master_addr;
    info.master_addr_source = "MASTER_ADDR";
  } else if (info.nodes == 1) {
    info.master_addr = std::string(kSingleProcessAddress);
    info.master_addr_source = "one host (HOROVOD_LOCAL_SIZE = HOROVOD_SIZE)";
  } else {
    std::string message = "this horovodrun job spans " + std::to_string(info.nodes) +
                          " hosts, but MASTER_ADDR is not set: rank 0's host is not among Horovod's variables";
    if (std::optional<std::string> rendezvous = read_variable(environment, kRendezvousAddr))
      message += " (" + quoted_variable(kRendezvousAddr, *rendezvous) +
                 " is horovodrun's own server on the host that started it)";
    message += "; start it as `MASTER_ADDR=<the first host> horovodrun ...`, which passes it on to every process";
    throw LaunchEnvError(message);
  }
  set_master_port_from_variable_or_recipe(environment, config, info);
  detection.world_size_description = layout.world_size.description + " (from horovod, Gloo controller)";
  return detection;
}

}  // namespace

bool horovod_variables_present(const Environment& environment) {
  if (gloo_variables_present(environment)) return true;
  return read_variable(environment, kController) == "mpi" && present_mpi_implementation(environment).has_value();
}

Detection detect_horovod(const Environment& environment, const LaunchConfig& config, std::string_view reason) {
  const bool gloo = gloo_variables_present(environment);
  check_controller(environment, gloo);
  if (gloo || read_variable(environment, kController) == "gloo") return detect_horovod_gloo(environment, config, reason);
  std::optional<MpiImplementation> mpi = present_mpi_implementation(environment);
  if (!mpi) {
    throw LaunchEnvError(std::string(reason) +
                         ", but neither Horovod's Gloo variables (HOROVOD_RANK, HOROVOD_SIZE, ...) nor an MPI "
                         "job's (OMPI_COMM_WORLD_RANK, MV2_COMM_WORLD_RANK, PMI_RANK) are set; start meshrun with "
                         "horovodrun");
  }
  // The MPI controller: mpirun's variables describe the process, and rank 0's
  // address comes from MASTER_ADDR or the MPI bootstrap as under plain mpirun.
  Detection detection = detect_mpi(environment, config, *mpi, reason);
  detection.info.launcher = "horovod";
  detection.world_size_description = std::string(mpi_variable_names(*mpi)[2]) + "=" +
                                     std::to_string(detection.info.world_size) + " (from horovod, MPI controller)";
  return detection;
}

}  // namespace meshrun::launch_detail
