// Choosing the launcher (auto precedence, explicit types) and checking the
// world against the recipe.
#include <doctest/doctest.h>

#include <cstdlib>
#include <map>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_config;
using launch_test::launch_error;
using launch_test::openmpi_environment;
using launch_test::slurm_environment;
using launch_test::torchrun_environment;

// torchrun started by srun: each srun task runs a torchrun agent, whose
// workers see both sets of variables.
MapEnvironment torchrun_under_srun() {
  MapEnvironment environment = slurm_environment(1, 0, 2, 1, 2, "1(x2)", "n[1-2]");
  const MapEnvironment torchrun = torchrun_environment(5, 1, 8, 4, 1);
  for (const auto& [name, value] : torchrun.variables()) {
    environment.set(name, value);
  }
  return environment;
}

TEST_CASE("no launcher variables: a world of one") {
  LaunchInfo info = detect_launch(MapEnvironment(), launch_config("auto", 1, 1, 29511), 1, "");
  CHECK(info.launcher == "single");
  CHECK(info.rank == 0);
  CHECK(info.local_rank == 0);
  CHECK(info.world_size == 1);
  CHECK(info.local_world_size == 1);
  CHECK(info.node_rank == 0);
  CHECK(info.nodes == 1);
  CHECK(info.master_addr == "127.0.0.1");
  CHECK(info.master_port == 29511);
  CHECK(info.master_port_source == "recipe");
  CHECK_FALSE(info.needs_mpi_bootstrap);

  // MASTER_PORT alone is not a launcher, but is honored.
  MapEnvironment port_only({{"MASTER_PORT", "29999"}, {"MASTER_ADDR", "elsewhere"}});
  LaunchInfo with_port = detect_launch(port_only, launch_config("auto"), 1, "");
  CHECK(with_port.launcher == "single");
  CHECK(with_port.master_port == 29999);
  CHECK(with_port.master_addr == "127.0.0.1");
}

TEST_CASE("auto: torchrun's variables win over SLURM's") {
  LaunchInfo info = detect_launch(torchrun_under_srun(), launch_config("auto"), 8, "");
  CHECK(info.launcher == "torchrun");
  CHECK(info.rank == 5);
  CHECK(info.world_size == 8);
  CHECK(info.hosts.empty());
  CHECK(present_launcher(torchrun_under_srun()) == "torchrun");
}

TEST_CASE("an explicit slurm type reads SLURM's variables even when torchrun's are present") {
  LaunchInfo info = detect_launch(torchrun_under_srun(), launch_config("slurm"), 2, "");
  CHECK(info.launcher == "slurm");
  CHECK(info.rank == 1);
  CHECK(info.world_size == 2);
  CHECK(info.node_rank == 1);
  CHECK(info.hosts == std::vector<std::string>{"n1", "n2"});
  // ...but MASTER_ADDR and MASTER_PORT belong to no one launcher, and win.
  CHECK(info.master_addr == "10.1.2.3");
  CHECK(info.master_port == 29400);
}

TEST_CASE("auto: SLURM's variables win over MPI's that agree with them, and MPI's over none") {
  MapEnvironment environment = slurm_environment(0, 0, 2, 0, 1, "2", "n1");
  const MapEnvironment openmpi = openmpi_environment(0, 0, 2, 2);  // srun --mpi=pmix sets both
  for (const auto& [name, value] : openmpi.variables()) {
    environment.set(name, value);
  }
  CHECK(detect_launch(environment, launch_config("auto"), 2, "").launcher == "slurm");
  CHECK(present_launcher(environment) == "slurm");
  CHECK(detect_launch(environment, launch_config("mpi"), 2, "").launcher == "mpi");
  // Worlds that disagree are not one process's: an error (detect_slurm_test.cpp), not SLURM's silently.
  environment.set("OMPI_COMM_WORLD_SIZE", "4");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto"), 2, ""); })
            .starts_with("SLURM_NTASKS='2' and OMPI_COMM_WORLD_SIZE='4' disagree"));
  CHECK(detect_launch(environment, launch_config("mpi"), 4, "").launcher == "mpi");

  CHECK(present_launcher(openmpi_environment(0, 0, 4, 4)) == "mpi");
  CHECK(present_launcher(MapEnvironment()) == "single");
}

TEST_CASE("an explicit torchrun type ignores SLURM's variables and needs its own") {
  MapEnvironment srun_only = slurm_environment(0, 0, 2, 0, 1, "2", "n1");
  CHECK(launch_error([&] { detect_launch(srun_only, launch_config("torchrun"), 0, ""); })
            .starts_with("launch.type = \"torchrun\" (start meshrun with torchrun), but these "
                         "variables are not set: RANK,"));
}

TEST_CASE("the local type: a worker of the local launcher, or the process the user started") {
  MapEnvironment worker = torchrun_environment(3, 1, 4, 2, 1);
  worker.set("MESHRUN_LAUNCHER", "local");
  CHECK(detect_launch(worker, launch_config("local", 2, 2), 4, "").launcher == "local");
  CHECK(present_launcher(worker) == "local");

  CHECK(detect_launch(MapEnvironment(), launch_config("local"), 1, "").launcher == "single");

  CHECK(launch_error([&] {
          detect_launch(torchrun_environment(0, 0, 1, 1, 0), launch_config("local"), 1, "");
        }) ==
        "launch.type = \"local\", but RANK or WORLD_SIZE is set without "
        "MESHRUN_LAUNCHER=local: another launcher (torchrun?) started this process; set "
        "launch.type = \"torchrun\" or \"auto\"");

  // The local type takes no rank from another launcher: alone under it (an
  // mpirun of one, an sbatch script) this process is the job; one of several
  // tasks, each would run the whole recipe into the same files.
  CHECK(detect_launch(openmpi_environment(0, 0, 1, 1), launch_config("local"), 1, "").launcher == "single");
  CHECK(launch_error([&] { detect_launch(openmpi_environment(1, 1, 2, 2), launch_config("local"), 1, ""); })
            .starts_with("launch.type = \"local\", but mpi started this process as one of several tasks"));

  MapEnvironment marked_only({{"MESHRUN_LAUNCHER", "local"}});
  CHECK(launch_error([&] { detect_launch(marked_only, launch_config("auto"), 0, ""); })
            .starts_with("MESHRUN_LAUNCHER=local marks a worker of meshrun's local launcher, but "
                         "these variables are not set: RANK, LOCAL_RANK,"));
}

TEST_CASE("MESHRUN_LAUNCHER takes no value but local and ray") {
  MapEnvironment environment = torchrun_environment(0, 0, 1, 1, 0);
  environment.set("MESHRUN_LAUNCHER", "slurm");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto"), 1, ""); }) ==
        "MESHRUN_LAUNCHER='slurm' is not a value meshrun sets (only 'local', by its local "
        "launcher, and 'ray', by its Ray job)");
  CHECK(present_launcher(environment) == "torchrun");
}

TEST_CASE("an unknown launch type is refused") {
  CHECK(launch_error([&] { detect_launch(MapEnvironment(), launch_config("pbs"), 1, ""); }) ==
        "launch.type = \"pbs\" is not one of local, ray, torchrun, horovod, slurm, mpi, auto");
}

TEST_CASE("the world must have the size the recipe asks for") {
  CHECK(launch_error([&] {
          detect_launch(torchrun_environment(0, 0, 8, 4, 0), launch_config("torchrun", 2, 2), 4,
                        "recipes/x.toml:5:1");
        }) ==
        "WORLD_SIZE=8 (from torchrun) but the recipe asks for launch.nodes × procs_per_node "
        "= 2 × 2 = 4 at recipes/x.toml:5:1");

  CHECK(launch_error([&] {
          detect_launch(slurm_environment(0, 0, 2, 0, 1, "2", "n1"), launch_config("auto", 1, 4), 4,
                        "");
        }) ==
        "SLURM_NTASKS=2 (from slurm) but the recipe asks for launch.nodes × procs_per_node "
        "= 1 × 4 = 4");

  // An expected size that is not nodes × procs_per_node (e.g. from a plan)
  // is quoted as a count.
  CHECK(launch_error([&] {
          detect_launch(torchrun_environment(0, 0, 8, 4, 0), launch_config("auto", 2, 4), 6,
                        "plan");
        }) == "WORLD_SIZE=8 (from torchrun) but the recipe asks for 6 processes at plan");

  MapEnvironment local_worker = torchrun_environment(0, 0, 2, 2, 0);
  local_worker.set("MESHRUN_LAUNCHER", "local");
  CHECK(launch_error([&] { detect_launch(local_worker, launch_config("local", 1, 4), 4, ""); }) ==
        "WORLD_SIZE=2 (from meshrun's local launcher) but the recipe asks for launch.nodes "
        "× procs_per_node = 1 × 4 = 4");

  // 0 skips the check.
  CHECK(detect_launch(torchrun_environment(0, 0, 8, 4, 0), launch_config("auto", 1, 1), 0, "")
            .world_size == 8);
}

TEST_CASE("a world of one where the recipe asks for more says how to start the workers") {
  CHECK(launch_error([&] {
          detect_launch(MapEnvironment(), launch_config("auto", 2, 2), 4, "r.toml:2:1");
        }) ==
        "this process is a world of one (no launcher variables are set) but the recipe asks "
        "for launch.nodes × procs_per_node = 2 × 2 = 4 at r.toml:2:1; start meshrun with a "
        "launcher (torchrun, srun, mpirun), or let it start its own workers with "
        "launch.type = \"local\"");
  CHECK(
      launch_error([&] { detect_launch(MapEnvironment(), launch_config("local", 1, 2), 2, ""); }) ==
      "this process is a world of one (no launcher variables are set) but the recipe asks "
      "for launch.nodes × procs_per_node = 1 × 2 = 2; meshrun's local launcher starts the "
      "workers, and this process is not one of them");
}

TEST_CASE("detect_launch reads the real process environment through ProcessEnvironment") {
  const std::map<std::string, std::string> worker =
      torchrun_environment_for(3, 1, 4, 2, 1, "127.0.0.1", 29123);
  // Save what the test runner's own environment holds, to put it back.
  std::map<std::string, std::optional<std::string>> saved;
  ProcessEnvironment process;
  for (const auto& [name, value] : worker) {
    saved[name] = process.get(name);
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  LaunchInfo info = detect_launch(process, launch_config("torchrun", 2, 2), 4, "");
  for (const auto& [name, value] : saved) {
    if (value) {
      ::setenv(name.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name.c_str());
    }
  }
  CHECK(info.rank == 3);
  CHECK(info.node_rank == 1);
  CHECK(info.master_port == 29123);
}

}  // namespace
}  // namespace meshrun
