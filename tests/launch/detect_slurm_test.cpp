#include <doctest/doctest.h>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_config;
using launch_test::launch_error;
using launch_test::slurm_environment;
using Hosts = std::vector<std::string>;

std::string slurm_error(const Environment& environment) {
  return launch_error([&] { detect_launch(environment, launch_config("slurm"), 0, ""); });
}

TEST_CASE("an srun task learns its place from SLURM's variables") {
  // srun -N 2 --ntasks-per-node 4: task 5 is local task 1 of node 1.
  MapEnvironment environment = slurm_environment(5, 1, 8, 1, 2, "4(x2)", "gpu[07-08]", "123456");
  LaunchInfo info = detect_launch(environment, launch_config("slurm", 2, 4), 8, "");
  CHECK(info.launcher == "slurm");
  CHECK(info.rank == 5);
  CHECK(info.local_rank == 1);
  CHECK(info.world_size == 8);
  CHECK(info.local_world_size == 4);
  CHECK(info.node_rank == 1);
  CHECK(info.nodes == 2);
  CHECK(info.hosts == Hosts{"gpu07", "gpu08"});
  CHECK(info.master_addr == "gpu07");
  CHECK(info.master_addr_source == "first host of SLURM_NODELIST");
  CHECK(info.job_id == "123456");
  CHECK_FALSE(info.needs_mpi_bootstrap);
}

TEST_CASE("uneven nodes: the local world is this node's entry of SLURM_TASKS_PER_NODE") {
  // 4(x2),3: node 2 holds tasks 8, 9 and 10.
  for (int localid = 0; localid < 3; ++localid) {
    CAPTURE(localid);
    LaunchInfo info =
        detect_launch(slurm_environment(8 + localid, localid, 11, 2, 3, "4(x2),3", "n[1-3]"),
                      launch_config("slurm"), 11, "");
    CHECK(info.local_world_size == 3);
    CHECK(info.node_rank == 2);
    CHECK(info.rank == 8 + localid);
  }
  LaunchInfo first_node = detect_launch(slurm_environment(3, 3, 11, 0, 3, "4(x2),3", "n[1-3]"),
                                        launch_config("slurm"), 11, "");
  CHECK(first_node.local_world_size == 4);
}

TEST_CASE("without MASTER_PORT the port is derived from the job id") {
  auto port_for_job = [](std::string job_id) {
    return detect_launch(slurm_environment(0, 0, 1, 0, 1, "1", "n1", std::move(job_id)),
                         launch_config("slurm"), 1, "");
  };
  LaunchInfo info = port_for_job("123456");
  CHECK(info.master_port == 10000 + 123456 % 20000);
  CHECK(info.master_port_source == "derived from SLURM_JOB_ID");
  CHECK(port_for_job("7").master_port == 10007);
  CHECK(port_for_job("20000").master_port == 10000);
  CHECK(port_for_job("39999").master_port == 29999);
  CHECK(port_for_job("4294967294").master_port == 10000 + 4294967294ULL % 20000);
  // Consecutive jobs, which may share a node, get different ports.
  CHECK(port_for_job("123457").master_port != info.master_port);

  CHECK(launch_error([&] { port_for_job("12a"); }) ==
        "SLURM_JOB_ID='12a' is not a number, so no master port can be derived from it; set "
        "MASTER_PORT");
}

TEST_CASE("MASTER_PORT beats the job id, and the recipe is the last resort") {
  MapEnvironment environment = slurm_environment(0, 0, 1, 0, 1, "1", "n1", "99");
  environment.set("MASTER_PORT", "31337");
  LaunchInfo info = detect_launch(environment, launch_config("slurm"), 1, "");
  CHECK(info.master_port == 31337);
  CHECK(info.master_port_source == "MASTER_PORT");

  MapEnvironment no_job = slurm_environment(0, 0, 1, 0, 1, "1", "n1", "");
  LaunchInfo from_recipe = detect_launch(no_job, launch_config("slurm", 1, 1, 29555), 1, "");
  CHECK(from_recipe.master_port == 29555);
  CHECK(from_recipe.master_port_source == "recipe");
  CHECK(from_recipe.job_id.empty());

  environment.set("MASTER_PORT", "0");
  CHECK(slurm_error(environment) == "MASTER_PORT='0' is not a port number (1-65535)");
}

TEST_CASE("MASTER_ADDR overrides the first host") {
  MapEnvironment environment = slurm_environment(1, 1, 2, 0, 1, "2", "gpu01");
  environment.set("MASTER_ADDR", "10.0.0.9");
  LaunchInfo info = detect_launch(environment, launch_config("slurm"), 2, "");
  CHECK(info.master_addr == "10.0.0.9");
  CHECK(info.master_addr_source == "MASTER_ADDR");
  CHECK(info.hosts == Hosts{"gpu01"});

  // With MASTER_ADDR, no nodelist is needed.
  environment.unset("SLURM_NODELIST");
  environment.unset("SLURM_JOB_NODELIST");
  LaunchInfo without_nodelist = detect_launch(environment, launch_config("slurm"), 2, "");
  CHECK(without_nodelist.master_addr == "10.0.0.9");
  CHECK(without_nodelist.hosts.empty());
}

TEST_CASE("the step's SLURM_NODELIST is read before the allocation's SLURM_JOB_NODELIST") {
  // A two-node step inside a four-node allocation.
  MapEnvironment environment = slurm_environment(0, 0, 2, 0, 2, "1(x2)", "n[3-4]");
  environment.set("SLURM_JOB_NODELIST", "n[1-4]");
  LaunchInfo info = detect_launch(environment, launch_config("slurm"), 2, "");
  CHECK(info.hosts == Hosts{"n3", "n4"});
  CHECK(info.master_addr == "n3");

  environment.unset("SLURM_NODELIST");
  environment.set("SLURM_JOB_NODELIST", "m[1-2]");
  LaunchInfo from_job = detect_launch(environment, launch_config("slurm"), 2, "");
  CHECK(from_job.hosts == Hosts{"m1", "m2"});
  CHECK(from_job.master_addr_source == "first host of SLURM_JOB_NODELIST");

  environment.unset("SLURM_JOB_NODELIST");
  CHECK(slurm_error(environment) ==
        "launch.type = \"slurm\" (start meshrun with srun), but neither SLURM_NODELIST nor "
        "SLURM_JOB_NODELIST is set, so the master host is unknown; set MASTER_ADDR");
}

TEST_CASE("missing SLURM variables are named") {
  MapEnvironment environment = slurm_environment(0, 0, 2, 0, 1, "2", "n1");
  environment.unset("SLURM_LOCALID");
  environment.unset("SLURM_TASKS_PER_NODE");
  const std::string message = slurm_error(environment);
  CHECK(
      message.starts_with("launch.type = \"slurm\" (start meshrun with srun), but these "
                          "variables are not set: SLURM_LOCALID, SLURM_TASKS_PER_NODE (set: "
                          "SLURM_PROCID='0', SLURM_NTASKS='2'"));

  CHECK(slurm_error(MapEnvironment()) ==
        "launch.type = \"slurm\" (start meshrun with srun), but these variables are not set: "
        "SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID, SLURM_NNODES, "
        "SLURM_TASKS_PER_NODE");
}

TEST_CASE("inconsistent SLURM data is refused, naming the variables") {
  CHECK(slurm_error(slurm_environment(0, 0, 12, 0, 3, "4(x2),3", "n[1-3]")) ==
        "SLURM_TASKS_PER_NODE='4(x2),3' adds up to 11 tasks but SLURM_NTASKS=12");
  CHECK(slurm_error(slurm_environment(0, 0, 8, 0, 3, "4(x2)", "n[1-3]")) ==
        "SLURM_TASKS_PER_NODE='4(x2)' lists 2 nodes but SLURM_NNODES=3");
  CHECK(slurm_error(slurm_environment(0, 0, 4, 2, 2, "2(x2)", "n[1-2]")) ==
        "SLURM_NODEID=2 is not less than SLURM_NNODES=2 (node ids count from 0)");
  CHECK(slurm_error(slurm_environment(0, 0, 4, 0, 2, "2(x2)", "n[1-3]")) ==
        "SLURM_NODELIST='n[1-3]' names 3 hosts but SLURM_NNODES=2");
  CHECK(slurm_error(slurm_environment(0, 0, 4, 0, 2, "2(x2)", "gpu[01-")) ==
        "SLURM_NODELIST='gpu[01-' is malformed: '[' at character 4 is never closed");
  CHECK(slurm_error(slurm_environment(0, 0, 4, 0, 2, "2(x2)", "gpu[5-3]")) ==
        "SLURM_NODELIST='gpu[5-3]' is malformed: range '5-3' at character 5 runs backwards");
  CHECK(slurm_error(slurm_environment(0, 0, 4, 0, 2, "2(x)", "n[1-2]")) ==
        "SLURM_TASKS_PER_NODE='2(x)' is malformed: entry '2(x)' needs a repeat count of 1 or "
        "more in (xN) (expected counts like \"4(x2),3\")");
  CHECK(slurm_error(slurm_environment(0, 0, 0, 0, 1, "1", "n1")) ==
        "SLURM_NTASKS='0' must be at least 1");
  CHECK(slurm_error(slurm_environment(0, 0, 1, 0, 0, "1", "n1")) ==
        "SLURM_NNODES='0' must be at least 1");

  MapEnvironment bad_procid = slurm_environment(0, 0, 2, 0, 1, "2", "n1");
  bad_procid.set("SLURM_PROCID", "abc");
  CHECK(slurm_error(bad_procid) == "SLURM_PROCID='abc' is not a number");
}

}  // namespace
}  // namespace meshrun

namespace meshrun {
namespace {

TEST_CASE("auto: SLURM's and MPI's variables for one process must agree (mpirun inside an sbatch script)") {
  using launch_test::launch_config;
  using launch_test::slurm_environment;
  // Every mpirun process inherits the batch step's SLURM_PROCID=0.
  MapEnvironment environment = slurm_environment(0, 0, 2, 0, 1, "2", "localhost", "777");
  environment.set("OMPI_COMM_WORLD_RANK", "1");
  environment.set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  environment.set("OMPI_COMM_WORLD_SIZE", "2");
  environment.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  CHECK(launch_test::launch_error([&] { detect_launch(environment, launch_config("auto", 1, 2), 2, ""); }) ==
        "SLURM_PROCID='0' and OMPI_COMM_WORLD_RANK='1' disagree: this process cannot be both; unset the variables "
        "of the launcher that did not start it (mpirun inside a SLURM allocation: set launch.type = \"mpi\")");
  // srun --mpi=pmix sets both for the same task: fine.
  environment.set("OMPI_COMM_WORLD_RANK", "0");
  environment.set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  CHECK(detect_launch(environment, launch_config("auto", 1, 2), 2, "").rank == 0);
}

TEST_CASE("alone under a launcher: the local launcher starts the workers in an sbatch script or a one-task step") {
  using launch_test::environment_of;
  CHECK(alone_under_launcher(MapEnvironment()));
  // An sbatch script's batch step: SLURM_PROCID but no step of tasks.
  MapEnvironment batch = launch_test::slurm_environment(0, 0, 8, 0, 1, "8", "n1", "5");
  batch.unset("SLURM_STEP_NUM_TASKS");
  CHECK(alone_under_launcher(batch));
  batch.set("SLURM_STEP_NUM_TASKS", "1");
  CHECK(alone_under_launcher(batch));
  batch.set("SLURM_STEP_NUM_TASKS", "2");  // srun -n 2: each task would start its own workers
  CHECK_FALSE(alone_under_launcher(batch));
  CHECK(alone_under_launcher(launch_test::openmpi_environment(0, 0, 1, 1)));
  CHECK_FALSE(alone_under_launcher(launch_test::openmpi_environment(0, 0, 2, 2)));
  CHECK_FALSE(alone_under_launcher(launch_test::torchrun_environment(0, 0, 1, 1, 0)));
  CHECK_FALSE(alone_under_launcher(environment_of({{"MESHRUN_LAUNCHER", "local"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}})));
}

}  // namespace
}  // namespace meshrun
