// Which launcher started this process: launch.type = "auto" picks by the
// variables present (precedence in env.hpp), an explicit type reads only its
// own; then the world is checked against the size the recipe asks for.
#include <string>

#include "launch_internal.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {
namespace {

using launch_detail::Detection;

// Only meshrun's own launchers set MESHRUN_LAUNCHER, to "local" or "ray";
// any other value is a typo that would otherwise be silently ignored.
void check_launcher_variable(const Environment& environment) {
  std::optional<std::string> value = launch_detail::read_variable(environment, kLauncherVariable);
  if (value && *value != "local" && *value != "ray") {
    throw LaunchEnvError(launch_detail::quoted_variable(kLauncherVariable, *value) +
                         " is not a value meshrun sets (only 'local', by its local launcher, and 'ray', by its "
                         "Ray job)");
  }
}

Detection single_process(const Environment& environment, const LaunchConfig& config) {
  Detection detection;
  LaunchInfo& info = detection.info;
  info.launcher = "single";
  info.master_addr = std::string(kSingleProcessAddress);
  info.master_addr_source = "single process";
  // Honored so that two single-process runs can share a machine.
  launch_detail::set_master_port_from_variable_or_recipe(environment, config, info);
  detection.world_size_description =
      "this process is a world of one (no launcher variables are set)";
  return detection;
}

Detection detect_auto(const Environment& environment, const LaunchConfig& config) {
  using namespace launch_detail;
  if (local_launcher_marked(environment)) {
    return detect_torchrun(environment, "local",
                           "MESHRUN_LAUNCHER=local marks a worker of meshrun's local launcher");
  }
  if (ray_launcher_marked(environment)) {
    return detect_torchrun(environment, "ray", "MESHRUN_LAUNCHER=ray marks a worker of meshrun's Ray job");
  }
  if (torchrun_variables_present(environment)) {
    return detect_torchrun(environment, "torchrun",
                           "RANK or WORLD_SIZE is set, so this looks like a torchrun worker");
  }
  if (horovod_variables_present(environment)) {
    return detect_horovod(environment, config,
                          "Horovod's variables are set, so this looks like a process started by horovodrun");
  }
  if (slurm_variables_present(environment)) {
    Detection detection =
        detect_slurm(environment, config, "SLURM_PROCID is set, so this looks like a task started by srun");
    // mpirun inside an sbatch script: every process inherits the batch
    // step's SLURM_PROCID, and SLURM's variables would make them all rank 0.
    check_mpi_agrees(environment, detection.info, "SLURM_PROCID", "SLURM_NTASKS",
                     " (mpirun inside a SLURM allocation: set launch.type = \"mpi\")");
    return detection;
  }
  if (std::optional<MpiImplementation> mpi = present_mpi_implementation(environment)) {
    return detect_mpi(environment, config, *mpi,
                      "MPI rank variables are set, so this looks like a process started by mpirun");
  }
  return single_process(environment, config);
}

Detection detect_for_type(const Environment& environment, const LaunchConfig& config) {
  using namespace launch_detail;
  const std::string& type = config.type;
  if (type == "auto") return detect_auto(environment, config);
  if (type == "torchrun") {
    return detect_torchrun(environment, local_launcher_marked(environment) ? "local" : "torchrun",
                           "launch.type = \"torchrun\" (start meshrun with torchrun)");
  }
  if (type == "slurm") {
    return detect_slurm(environment, config, "launch.type = \"slurm\" (start meshrun with srun)");
  }
  if (type == "mpi") {
    std::optional<MpiImplementation> mpi = present_mpi_implementation(environment);
    if (!mpi) {
      throw LaunchEnvError(
          "launch.type = \"mpi\", but no MPI launcher variables are set: expected "
          "OMPI_COMM_WORLD_RANK (Open MPI), MV2_COMM_WORLD_RANK (MVAPICH) or PMI_RANK "
          "(MPICH, Intel MPI); start meshrun with mpirun or mpiexec");
    }
    return detect_mpi(environment, config, *mpi, "launch.type = \"mpi\"");
  }
  if (type == "horovod") {
    return detect_horovod(environment, config, "launch.type = \"horovod\" (start meshrun with horovodrun)");
  }
  if (type == "ray") {
    if (!ray_launcher_marked(environment)) {
      throw LaunchEnvError(
          "launch.type = \"ray\", but this process is not a worker of meshrun's Ray job (MESHRUN_LAUNCHER=ray "
          "is not set); submit the recipe to the cluster with `meshrun submit RECIPE --ray`");
    }
    return detect_torchrun(environment, "ray", "launch.type = \"ray\"");
  }
  if (type == "local") {
    if (local_launcher_marked(environment)) {
      return detect_torchrun(environment, "local", "launch.type = \"local\"");
    }
    if (torchrun_variables_present(environment)) {
      throw LaunchEnvError(
          "launch.type = \"local\", but RANK or WORLD_SIZE is set without MESHRUN_LAUNCHER=local: "
          "another launcher (torchrun?) started this process; set launch.type = \"torchrun\" or "
          "\"auto\"");
    }
    if (const std::string present = present_launcher(environment); !alone_under_launcher(environment)) {
      throw LaunchEnvError("launch.type = \"local\", but " + present +
                           " started this process as one of several tasks: each would run the recipe with workers "
                           "of its own; start meshrun once (one task, or from the batch script), or set "
                           "launch.type = \"" + present + "\" or \"auto\" to make the tasks the workers");
    }
    return single_process(environment, config);
  }
  throw LaunchEnvError("launch.type = \"" + type +
                       "\" is not one of local, ray, torchrun, horovod, slurm, mpi, auto");
}

std::string recipe_request(const LaunchConfig& config, int expected_world_size) {
  if (expected_world_size == config.nodes * config.procs_per_node) {
    return "launch.nodes × procs_per_node = " + std::to_string(config.nodes) + " × " +
           std::to_string(config.procs_per_node) + " = " + std::to_string(expected_world_size);
  }
  return std::to_string(expected_world_size) + " processes";
}

}  // namespace

LaunchInfo detect_launch(const Environment& environment, const LaunchConfig& config,
                         int expected_world_size, const std::string& recipe_location) {
  check_launcher_variable(environment);
  Detection detection = detect_for_type(environment, config);
  if (expected_world_size > 0 && detection.info.world_size != expected_world_size) {
    std::string message = detection.world_size_description + " but the recipe asks for " +
                          recipe_request(config, expected_world_size);
    if (!recipe_location.empty()) message += " at " + recipe_location;
    if (detection.info.launcher == "single") {
      message += config.type == "local"
                     ? "; meshrun's local launcher starts the workers, and this process is "
                       "not one of them"
                     : "; start meshrun with a launcher (torchrun, srun, mpirun), or let it "
                       "start its own workers with launch.type = \"local\"";
    }
    throw LaunchEnvError(message);
  }
  return std::move(detection.info);
}

bool alone_under_launcher(const Environment& environment) {
  using namespace launch_detail;
  const std::string launcher = present_launcher(environment);
  if (launcher == "single") return true;
  if (launcher == "slurm") {
    const std::optional<std::string> step_tasks = read_variable(environment, "SLURM_STEP_NUM_TASKS");
    return !step_tasks || *step_tasks == "1";
  }
  if (launcher == "mpi") {
    const std::optional<MpiImplementation> mpi = present_mpi_implementation(environment);
    const std::optional<std::string> size = mpi ? read_variable(environment, mpi_variable_names(*mpi)[2]) : std::nullopt;
    return size && *size == "1";
  }
  return false;
}

std::string present_launcher(const Environment& environment) {
  using namespace launch_detail;
  if (local_launcher_marked(environment)) return "local";
  if (ray_launcher_marked(environment)) return "ray";
  if (torchrun_variables_present(environment)) return "torchrun";
  if (horovod_variables_present(environment)) return "horovod";
  if (slurm_variables_present(environment)) return "slurm";
  if (present_mpi_implementation(environment)) return "mpi";
  return "single";
}

}  // namespace meshrun
