#include <doctest/doctest.h>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::environment_of;
using launch_test::launch_config;
using launch_test::launch_error;

TEST_CASE("torchrun_environment_for sets what torchrun sets") {
  const std::map<std::string, std::string> expected = {
      {"RANK", "5"},       {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "8"},      {"LOCAL_WORLD_SIZE", "4"},
      {"GROUP_RANK", "1"}, {"NODE_RANK", "1"},  {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}};
  CHECK(torchrun_environment_for(5, 1, 8, 4, 1, "node0", 29500) == expected);
}

TEST_CASE("every worker of a 2 × 4 world detects the place it was given") {
  for (int rank = 0; rank < 8; ++rank) {
    CAPTURE(rank);
    const int local_rank = rank % 4;
    const int node_rank = rank / 4;
    MapEnvironment environment = environment_of(
        torchrun_environment_for(rank, local_rank, 8, 4, node_rank, "10.0.0.1", 29501));
    LaunchInfo info = detect_launch(environment, launch_config("auto", 2, 4), 8, "");
    CHECK(info.launcher == "torchrun");
    CHECK(info.rank == rank);
    CHECK(info.local_rank == local_rank);
    CHECK(info.world_size == 8);
    CHECK(info.local_world_size == 4);
    CHECK(info.node_rank == node_rank);
    CHECK(info.nodes == 2);
    CHECK(info.master_addr == "10.0.0.1");
    CHECK(info.master_port == 29501);
  }
}

TEST_CASE("the local launcher's workers detect themselves as local") {
  const std::map<std::string, std::string> variables =
      local_worker_environment_for(2, 2, 3, 3, 0, "127.0.0.1", 29502);
  CHECK(variables.at("MESHRUN_LAUNCHER") == "local");
  MapEnvironment environment = environment_of(variables);
  for (const char* type : {"auto", "local"}) {
    CAPTURE(type);
    LaunchInfo info = detect_launch(environment, launch_config(type, 1, 3), 3, "");
    CHECK(info.launcher == "local");
    CHECK(info.rank == 2);
    CHECK(info.local_rank == 2);
    CHECK(info.world_size == 3);
  }
}

TEST_CASE("an environment that detection would reject is refused up front") {
  auto error_for = [](int rank, int local_rank, int world_size, int local_world_size, int node_rank,
                      std::string master_addr, int master_port) {
    return launch_error([&] {
      torchrun_environment_for(rank, local_rank, world_size, local_world_size, node_rank,
                               master_addr, master_port);
    });
  };
  CHECK(error_for(-1, 0, 2, 2, 0, "h", 1) == "rank=-1 is negative");
  CHECK(error_for(0, -1, 2, 2, 0, "h", 1) == "local_rank=-1 is negative");
  CHECK(error_for(0, 0, 2, 2, -1, "h", 1) == "node_rank=-1 is negative");
  CHECK(error_for(0, 0, 0, 1, 0, "h", 1) ==
        "world_size=0 and local_world_size=1 must both be at least 1");
  CHECK(error_for(0, 0, 6, 4, 0, "h", 1) == "world_size=6 is not a multiple of local_world_size=4");
  CHECK(error_for(0, 0, 2, 2, 0, "", 1) == "master_addr is empty");
  CHECK(error_for(0, 0, 2, 2, 0, "h", 0) == "master_port=0 is not a port number (1-65535)");
  CHECK(error_for(0, 0, 2, 2, 0, "h", 65536) == "master_port=65536 is not a port number (1-65535)");
  CHECK(error_for(2, 0, 2, 2, 0, "h", 1) ==
        "rank=2 is not less than world_size=2 (ranks and indices count from 0)");
  CHECK(error_for(1, 2, 4, 2, 0, "h", 1) ==
        "local_rank=2 is not less than local_world_size=2 (ranks and indices count from 0)");
  CHECK(error_for(1, 1, 4, 2, 2, "h", 1) ==
        "node_rank=2 is not less than nodes 2 (world_size / local_world_size) (ranks and indices "
        "count from 0)");
  CHECK(error_for(3, 1, 4, 2, 0, "h", 1)
            .starts_with("rank=3 is not 1 = node_rank=0 × local_world_size=2 + local_rank=1"));
}

}  // namespace
}  // namespace meshrun
