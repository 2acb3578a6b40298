#include <doctest/doctest.h>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_config;
using launch_test::launch_error;
using launch_test::torchrun_environment;

TEST_CASE("a torchrun worker learns its place from torchrun's variables") {
  // torchrun --nnodes 2 --nproc-per-node 4: rank 6 is local rank 2 of node 1.
  LaunchInfo info =
      detect_launch(torchrun_environment(6, 2, 8, 4, 1), launch_config("torchrun", 2, 4), 8, "");
  CHECK(info.launcher == "torchrun");
  CHECK(info.mpi_implementation.empty());
  CHECK(info.rank == 6);
  CHECK(info.local_rank == 2);
  CHECK(info.world_size == 8);
  CHECK(info.local_world_size == 4);
  CHECK(info.node_rank == 1);
  CHECK(info.nodes == 2);
  CHECK(info.master_addr == "10.1.2.3");
  CHECK(info.master_addr_source == "MASTER_ADDR");
  CHECK(info.master_port == 29400);
  CHECK(info.master_port_source == "MASTER_PORT");
  CHECK_FALSE(info.needs_mpi_bootstrap);
  CHECK(info.hosts.empty());
  CHECK(info.job_id == "run-7");
}

TEST_CASE("the node rank comes from GROUP_RANK, else NODE_RANK, else RANK / LOCAL_WORLD_SIZE") {
  MapEnvironment environment = torchrun_environment(5, 1, 8, 2, 2);
  environment.set("NODE_RANK", "7");  // GROUP_RANK wins; NODE_RANK is not even checked
  CHECK(detect_launch(environment, launch_config("auto"), 8, "").node_rank == 2);

  environment.unset("GROUP_RANK");
  environment.set("NODE_RANK", "2");
  CHECK(detect_launch(environment, launch_config("auto"), 8, "").node_rank == 2);

  environment.set("NODE_RANK", "3");
  CHECK(launch_error([&] {
          detect_launch(environment, launch_config("auto"), 8, "");
        }).starts_with("RANK=5 is not 7 = NODE_RANK=3 × LOCAL_WORLD_SIZE=2 + LOCAL_RANK=1"));

  environment.unset("NODE_RANK");
  LaunchInfo derived = detect_launch(environment, launch_config("auto"), 8, "");
  CHECK(derived.node_rank == 2);
  CHECK(derived.nodes == 4);
}

TEST_CASE("a world that does not divide into equal nodes is refused") {
  CHECK(launch_error([&] {
          detect_launch(torchrun_environment(0, 0, 10, 4, 0), launch_config("auto"), 0, "");
        }) ==
        "WORLD_SIZE=10 is not a multiple of LOCAL_WORLD_SIZE=4: meshrun needs the same "
        "number of processes on every node");
  CHECK(launch_error([&] {
          detect_launch(torchrun_environment(0, 0, 4, 8, 0), launch_config("auto"), 0, "");
        }) ==
        "WORLD_SIZE=4 is not a multiple of LOCAL_WORLD_SIZE=8: meshrun needs the same "
        "number of processes on every node");
}

TEST_CASE("an explicit torchrun type without torchrun's variables names them all") {
  MapEnvironment nothing;
  CHECK(launch_error([&] { detect_launch(nothing, launch_config("torchrun"), 0, ""); }) ==
        "launch.type = \"torchrun\" (start meshrun with torchrun), but these variables are not "
        "set: RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT");
}

TEST_CASE("the run id is optional") {
  MapEnvironment environment = torchrun_environment(0, 0, 1, 1, 0);
  environment.unset("TORCHELASTIC_RUN_ID");
  CHECK(detect_launch(environment, launch_config("torchrun"), 1, "").job_id.empty());
}

TEST_CASE("torchrun's variables with MESHRUN_LAUNCHER=local are the local launcher's") {
  MapEnvironment environment = torchrun_environment(1, 1, 2, 2, 0);
  environment.set("MESHRUN_LAUNCHER", "local");
  CHECK(detect_launch(environment, launch_config("auto"), 2, "").launcher == "local");
  CHECK(detect_launch(environment, launch_config("local"), 2, "").launcher == "local");
  CHECK(detect_launch(environment, launch_config("torchrun"), 2, "").launcher == "local");
}

}  // namespace
}  // namespace meshrun
