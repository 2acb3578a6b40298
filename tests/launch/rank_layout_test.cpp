// The consistency every launcher's numbers must have, whichever launcher
// gave them.
#include <doctest/doctest.h>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_config;
using launch_test::launch_error;
using launch_test::openmpi_environment;
using launch_test::slurm_environment;
using launch_test::torchrun_environment;

std::string detect_error(const Environment& environment) {
  return launch_error([&] { detect_launch(environment, launch_config("auto"), 0, ""); });
}

TEST_CASE("a rank at or past the world size is refused") {
  CHECK(detect_error(torchrun_environment(4, 0, 4, 4, 0)) ==
        "RANK=4 is not less than WORLD_SIZE=4 (ranks and indices count from 0)");
  CHECK(detect_error(slurm_environment(2, 0, 2, 0, 1, "2", "n1")) ==
        "SLURM_PROCID=2 is not less than SLURM_NTASKS=2 (ranks and indices count from 0)");
  CHECK(detect_error(openmpi_environment(9, 1, 8, 4)) ==
        "OMPI_COMM_WORLD_RANK=9 is not less than OMPI_COMM_WORLD_SIZE=8 (ranks and indices "
        "count from 0)");
}

TEST_CASE("a local rank at or past the local world size is refused") {
  CHECK(detect_error(torchrun_environment(2, 2, 4, 2, 1)) ==
        "LOCAL_RANK=2 is not less than LOCAL_WORLD_SIZE=2 (ranks and indices count from 0)");
  CHECK(detect_error(openmpi_environment(3, 4, 8, 4)) ==
        "OMPI_COMM_WORLD_LOCAL_RANK=4 is not less than OMPI_COMM_WORLD_LOCAL_SIZE=4 (ranks and "
        "indices count from 0)");
  CHECK(detect_error(slurm_environment(3, 3, 4, 1, 2, "1,3", "n[1-2]")) ==
        "SLURM_LOCALID=3 is not less than tasks on this node 3 (entry 1 of "
        "SLURM_TASKS_PER_NODE='1,3', by SLURM_NODEID=1) (ranks and indices count from 0)");
}

TEST_CASE("a node rank at or past the node count is refused") {
  CHECK(detect_error(torchrun_environment(3, 1, 4, 2, 2)) ==
        "GROUP_RANK=2 is not less than nodes 2 (WORLD_SIZE / LOCAL_WORLD_SIZE) (ranks and "
        "indices count from 0)");
}

TEST_CASE("the ranks of a node must be consecutive") {
  // GROUP_RANK=0 holds ranks 0-1 of a 2x2 world, so rank 2 cannot be there.
  CHECK(detect_error(torchrun_environment(2, 0, 4, 2, 0)) ==
        "RANK=2 is not 0 = GROUP_RANK=0 × LOCAL_WORLD_SIZE=2 + LOCAL_RANK=0: the ranks of a "
        "node are not consecutive, but meshrun's plan places ranks node by node; let torchrun "
        "number the ranks, with the same --nproc-per-node on every node");

  // srun --distribution=cyclic on 2 nodes x 2: node 0 holds tasks 0 and 2.
  CHECK(detect_error(slurm_environment(2, 1, 4, 0, 2, "2(x2)", "n[1-2]")) ==
        "SLURM_PROCID=2 is not 1 = the 0 tasks on nodes before SLURM_NODEID=0 + SLURM_LOCALID=1: "
        "the ranks of a node are not consecutive, but meshrun's plan places ranks node by node; "
        "start the step with srun --distribution=block");

  // mpirun --map-by node on 2 nodes x 2: rank 1 is local rank 0 of node 1.
  const std::string mpi_error = detect_error(openmpi_environment(1, 0, 4, 2));
  CHECK(mpi_error.starts_with(
      "OMPI_COMM_WORLD_RANK=1 is not 0 = node rank 0 (OMPI_COMM_WORLD_RANK / "
      "OMPI_COMM_WORLD_LOCAL_SIZE) × OMPI_COMM_WORLD_LOCAL_SIZE=2 + OMPI_COMM_WORLD_LOCAL_RANK=0"));
  CHECK(mpi_error.ends_with("rather than --map-by node"));
}

TEST_CASE("a consistent layout passes for every rank of the world") {
  for (int rank = 0; rank < 6; ++rank) {
    CAPTURE(rank);
    LaunchInfo info = detect_launch(torchrun_environment(rank, rank % 3, 6, 3, rank / 3),
                                    launch_config("auto"), 6, "");
    CHECK(info.rank == rank);
    CHECK(info.local_rank == rank % 3);
    CHECK(info.node_rank == rank / 3);
    CHECK(info.nodes == 2);
  }
}

}  // namespace
}  // namespace meshrun
