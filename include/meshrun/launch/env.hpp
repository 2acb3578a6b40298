// Launch environment: who this process is in the job, learned from whatever
// started it (the local launcher, torchrun, SLURM's srun, or mpirun), and
// checked before any connection is tried.
//
// detect_launch() reads the environment through the Environment interface
// (tests pass a MapEnvironment) and either returns a LaunchInfo that holds
// these invariants or throws LaunchEnvError naming the offending variables
// and their values:
//   0 <= rank < world_size, 0 <= local_rank < local_world_size <= world_size,
//   nodes >= 1, 0 <= node_rank < nodes, 1 <= master_port <= 65535, and
//   master_addr is non-empty unless needs_mpi_bootstrap; and the ranks of a
//   node are consecutive (the placement the plan assumes), so a rank that a
//   round-robin placement (srun --distribution=cyclic, mpirun --map-by node)
//   gave is an error.
// Under SLURM without MASTER_PORT, the port is 10000 + SLURM_JOB_ID % 20000:
// every task of a job agrees on it, and jobs sharing a node differ.
//
// Launchers, and the variables each one is recognized by, in the precedence
// that launch.type = "auto" uses (torchrun is often started by srun, so its
// variables win over SLURM's; SLURM's over MPI's for the same reason; and
// horovodrun's over SLURM's and MPI's, since it runs inside allocations and
// starts mpirun itself):
//   local     MESHRUN_LAUNCHER=local (set with torchrun's variables)
//   ray       MESHRUN_LAUNCHER=ray (meshrun's Ray job sets it with torchrun's
//             variables and MESHRUN_RAY_JOB_ID)
//   torchrun  RANK or WORLD_SIZE
//   horovod   HOROVOD_RANK, HOROVOD_SIZE or HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT
//             (Gloo controller), or HOROVOD_CONTROLLER=mpi with MPI's rank
//             variables (MPI controller; without it such a job reads as mpi,
//             which runs the same way)
//   slurm     SLURM_PROCID
//   mpi       OMPI_COMM_WORLD_RANK/SIZE (Open MPI), then MV2_COMM_WORLD_RANK/SIZE
//             (MVAPICH), then PMI_RANK/SIZE (MPICH, Intel MPI)
//   single    none of the above: a world of one process on 127.0.0.1
// An explicit launch.type of torchrun, slurm, mpi or horovod reads only that
// launcher's variables (horovod: the Gloo controller's, else MPI's), and
// their absence is an error. launch.type = "local" reads the torchrun
// variables of a worker the local launcher started, or, when there are none,
// describes the process the user started (a world of one). launch.type =
// "ray" reads only a worker of meshrun's Ray job.
#pragma once

#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "meshrun/error.hpp"

namespace meshrun {

struct LaunchConfig;  // meshrun/recipe/recipe.hpp

// Where environment variables come from: the process, or a fake in tests.
class Environment {
 public:
  virtual ~Environment() = default;
  // The variable's value; std::nullopt when it is not set.
  virtual std::optional<std::string> get(std::string_view name) const = 0;
};

// The environment of this process (getenv).
class ProcessEnvironment final : public Environment {
 public:
  std::optional<std::string> get(std::string_view name) const override;
};

// A fixed set of variables.
class MapEnvironment final : public Environment {
 public:
  MapEnvironment() = default;
  explicit MapEnvironment(std::map<std::string, std::string, std::less<>> variables);
  // MapEnvironment({{"RANK", "0"}}): without it, one braced pair is ambiguous.
  MapEnvironment(std::initializer_list<std::pair<const std::string, std::string>> variables);

  std::optional<std::string> get(std::string_view name) const override;
  void set(std::string name, std::string value);
  void unset(std::string_view name);
  const std::map<std::string, std::string, std::less<>>& variables() const { return variables_; }

 private:
  std::map<std::string, std::string, std::less<>> variables_;
};

// The launch environment is missing, malformed or inconsistent. The message
// names every variable involved with its value.
class LaunchEnvError : public KindError<ErrorKind::config> {
 public:
  using KindError::KindError;
};

struct LaunchInfo {
  std::string launcher;            // single | local | ray | torchrun | horovod | slurm | mpi
  std::string mpi_implementation;  // openmpi | mvapich | pmi (MPICH, Intel MPI); else empty
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int nodes = 1;
  std::string master_addr;         // empty only when needs_mpi_bootstrap
  std::string master_addr_source;  // e.g. "MASTER_ADDR", "first host of SLURM_NODELIST"
  int master_port = 0;
  std::string master_port_source;  // "MASTER_PORT", "derived from SLURM_JOB_ID", "recipe"
  // MPI without MASTER_ADDR: rank 0's address must be broadcast over MPI
  // before the rendezvous can start.
  bool needs_mpi_bootstrap = false;
  std::vector<std::string> hosts;  // one per node, node_rank order; empty when unknown
  std::string job_id;              // empty when the launcher gives none
};

// "local" or "ray": set by meshrun's own launchers for their workers.
inline constexpr std::string_view kLauncherVariable = "MESHRUN_LAUNCHER";
// The Ray job's submission id, for LaunchInfo::job_id.
inline constexpr std::string_view kRayJobVariable = "MESHRUN_RAY_JOB_ID";
inline constexpr std::string_view kSingleProcessAddress = "127.0.0.1";

// Reads and checks the environment for `launch.type` (config.type).
// `expected_world_size` is the number of processes the recipe asks for
// (launch.nodes × procs_per_node); a detected world of another size is an
// error whose message points at `recipe_location`. An expected world size
// of 0 or less skips that check (e.g. `meshrun env` without a recipe).
// Throws LaunchEnvError.
LaunchInfo detect_launch(const Environment& environment, const LaunchConfig& config,
                         int expected_world_size, const std::string& recipe_location);

// The launcher that launch.type = "auto" would pick from the variables that
// are present ("local", "ray", "torchrun", "horovod", "slurm", "mpi" or "single"), without
// reading or checking their values. The local launcher's parent process
// uses it to tell a worker from the process the user started.
std::string present_launcher(const Environment& environment);

// Whether this process is the only one its launcher started, so that with
// launch.type "local" or "auto" meshrun's local launcher starts the
// recipe's workers itself: no launcher variables, or those of a SLURM
// allocation this process runs in alone (an sbatch script, whose batch step
// has no SLURM_STEP_NUM_TASKS, or an srun step of one task), or an MPI world
// of one. Not for a worker of meshrun's own launchers, torchrun or Horovod.
bool alone_under_launcher(const Environment& environment);

// SLURM's hostlist form: "gpu[01-04,07],login1" -> gpu01 gpu02 gpu03 gpu04
// gpu07 login1. Several bracket groups in one name expand as a cartesian
// product, the rightmost varying fastest, as `scontrol show hostnames` does.
// "" -> no hosts. Throws LaunchEnvError on malformed input.
std::vector<std::string> expand_hostlist(std::string_view hostlist);

// SLURM_TASKS_PER_NODE's compressed form: "4(x2),3" -> 4 4 3. Every count is
// at least 1. Throws LaunchEnvError on malformed input.
std::vector<int> expand_tasks_per_node(std::string_view tasks_per_node);

// For `meshrun env`: one aligned "key: value" line per field.
std::string format_launch_info_text(const LaunchInfo& info);
// The same fields as one JSON object (with a trailing newline).
std::string format_launch_info_json(const LaunchInfo& info);

// The variables torchrun sets for a worker: RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, NODE_RANK, MASTER_ADDR and MASTER_PORT.
// Throws LaunchEnvError when the values break the invariants above.
std::map<std::string, std::string> torchrun_environment_for(int rank, int local_rank,
                                                            int world_size, int local_world_size,
                                                            int node_rank,
                                                            const std::string& master_addr,
                                                            int master_port);

// What the local launcher sets for each worker it starts: the torchrun
// variables plus MESHRUN_LAUNCHER=local, so that the worker detects "local".
std::map<std::string, std::string> local_worker_environment_for(int rank, int local_rank,
                                                                int world_size,
                                                                int local_world_size, int node_rank,
                                                                const std::string& master_addr,
                                                                int master_port);

// Completes an mpirun launch detected without MASTER_ADDR (needs_mpi_bootstrap):
// a collective call that every rank of the MPI job must make. MPI is
// initialized here if it is not already, rank 0 chooses the rendezvous
// address and port, MPI_Bcast gives them to every rank, and MPI is finalized
// again when this call initialized it (MPI is used for nothing else). On
// return master_addr, master_port and their sources are set and
// needs_mpi_bootstrap is false; without needs_mpi_bootstrap it does nothing.
//
// Rank 0's address, in this order: the IPv4 address of the interface named by
// MESHRUN_MASTER_INTERFACE; 127.0.0.1 when every rank runs on one node (local
// world size == world size); the first non-loopback IPv4 address the host
// name resolves to; the first non-loopback IPv4 address of an interface that
// is up. The port: MASTER_PORT when set, else one that is free on that
// address. Throws LaunchEnvError (on every rank where the failure is
// collective) when MPI fails (with MPI's error string), when MPI's rank or
// size differs from `info`'s, when rank 0 finds no address, or when meshrun
// was built without MPI.
void complete_mpi_bootstrap(LaunchInfo& info);

}  // namespace meshrun
