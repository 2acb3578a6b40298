// The LaunchInfo of one rank of a test job on this machine: the worker
// programs that tests start as processes meet over loopback, node by node
// in equal shares (a local launch, as `meshrun` itself would describe it).
#pragma once

#include "meshrun/launch/env.hpp"

namespace meshrun::test {

inline LaunchInfo loopback_launch(int rank, int world, int port, int nodes = 1) {
  LaunchInfo launch;
  launch.launcher = "local";
  launch.rank = rank;
  launch.world_size = world;
  launch.nodes = nodes;
  launch.local_world_size = world / nodes;
  launch.local_rank = rank % launch.local_world_size;
  launch.node_rank = rank / launch.local_world_size;
  launch.master_addr = "127.0.0.1";
  launch.master_port = port;
  return launch;
}

}  // namespace meshrun::test
