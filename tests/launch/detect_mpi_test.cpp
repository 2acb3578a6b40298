#include <doctest/doctest.h>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_config;
using launch_test::launch_error;
using launch_test::openmpi_environment;

TEST_CASE("an Open MPI process learns its place, and needs a bootstrap for the master") {
  // mpirun -np 8 --map-by ppr:4:node on 2 nodes: rank 6 is local rank 2 of node 1.
  LaunchInfo info =
      detect_launch(openmpi_environment(6, 2, 8, 4), launch_config("mpi", 2, 4, 29600), 8, "");
  CHECK(info.launcher == "mpi");
  CHECK(info.mpi_implementation == "openmpi");
  CHECK(info.rank == 6);
  CHECK(info.local_rank == 2);
  CHECK(info.world_size == 8);
  CHECK(info.local_world_size == 4);
  CHECK(info.node_rank == 1);
  CHECK(info.nodes == 2);
  CHECK(info.master_addr.empty());
  CHECK(info.needs_mpi_bootstrap);
  CHECK(info.master_addr_source == "rank 0's address, broadcast over MPI at startup");
  CHECK(info.master_port == 29600);
  CHECK(info.master_port_source == "recipe");
  CHECK(info.hosts.empty());
}

TEST_CASE("Open MPI's OMPI_COMM_WORLD_NODE_RANK is not mistaken for the node index") {
  // It counts this process among every job's processes on the node: the
  // first process of node 1 is node rank 0 in that sense.
  MapEnvironment environment = openmpi_environment(4, 0, 8, 4);
  environment.set("OMPI_COMM_WORLD_NODE_RANK", "0");
  CHECK(detect_launch(environment, launch_config("mpi"), 8, "").node_rank == 1);
}

TEST_CASE("MASTER_ADDR and MASTER_PORT make the bootstrap unnecessary") {
  MapEnvironment environment = openmpi_environment(0, 0, 2, 2);
  environment.set("MASTER_ADDR", "head");
  environment.set("MASTER_PORT", "40000");
  LaunchInfo info = detect_launch(environment, launch_config("auto"), 2, "");
  CHECK(info.master_addr == "head");
  CHECK(info.master_addr_source == "MASTER_ADDR");
  CHECK_FALSE(info.needs_mpi_bootstrap);
  CHECK(info.master_port == 40000);
  CHECK(info.master_port_source == "MASTER_PORT");
}

TEST_CASE("MVAPICH's variables") {
  MapEnvironment environment({{"MV2_COMM_WORLD_RANK", "3"},
                              {"MV2_COMM_WORLD_LOCAL_RANK", "1"},
                              {"MV2_COMM_WORLD_SIZE", "4"},
                              {"MV2_COMM_WORLD_LOCAL_SIZE", "2"}});
  LaunchInfo info = detect_launch(environment, launch_config("mpi"), 4, "");
  CHECK(info.mpi_implementation == "mvapich");
  CHECK(info.rank == 3);
  CHECK(info.local_rank == 1);
  CHECK(info.node_rank == 1);
  CHECK(info.nodes == 2);
  CHECK(info.needs_mpi_bootstrap);
}

TEST_CASE("MPICH's and Intel MPI's Hydra variables") {
  MapEnvironment environment(
      {{"PMI_RANK", "5"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "2"}, {"MPI_LOCALNRANKS", "3"}});
  LaunchInfo info = detect_launch(environment, launch_config("auto"), 6, "");
  CHECK(info.launcher == "mpi");
  CHECK(info.mpi_implementation == "pmi");
  CHECK(info.rank == 5);
  CHECK(info.local_rank == 2);
  CHECK(info.local_world_size == 3);
  CHECK(info.node_rank == 1);
  CHECK(info.nodes == 2);

  environment.unset("MPI_LOCALRANKID");
  environment.unset("MPI_LOCALNRANKS");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("mpi"), 6, ""); }) ==
        "launch.type = \"mpi\", but these variables are not set: MPI_LOCALRANKID, "
        "MPI_LOCALNRANKS (set: PMI_RANK='5', PMI_SIZE='6')");
}

TEST_CASE("Open MPI's variables win over MVAPICH's and PMI's") {
  MapEnvironment environment = openmpi_environment(0, 0, 1, 1);
  environment.set("MV2_COMM_WORLD_RANK", "3");
  environment.set("PMI_RANK", "3");
  CHECK(detect_launch(environment, launch_config("mpi"), 1, "").mpi_implementation == "openmpi");
  environment.set("MV2_COMM_WORLD_RANK", "0");
  environment.set("MV2_COMM_WORLD_LOCAL_RANK", "0");
  environment.set("MV2_COMM_WORLD_SIZE", "1");
  environment.set("MV2_COMM_WORLD_LOCAL_SIZE", "1");
  environment.unset("OMPI_COMM_WORLD_RANK");
  environment.unset("OMPI_COMM_WORLD_SIZE");
  CHECK(detect_launch(environment, launch_config("mpi"), 1, "").mpi_implementation == "mvapich");
}

TEST_CASE("an explicit mpi type without any MPI variables says which it looked for") {
  CHECK(launch_error([&] { detect_launch(MapEnvironment(), launch_config("mpi"), 0, ""); }) ==
        "launch.type = \"mpi\", but no MPI launcher variables are set: expected "
        "OMPI_COMM_WORLD_RANK (Open MPI), MV2_COMM_WORLD_RANK (MVAPICH) or PMI_RANK (MPICH, "
        "Intel MPI); start meshrun with mpirun or mpiexec");
}

TEST_CASE("uneven or partial MPI worlds are refused") {
  CHECK(launch_error([&] {
          detect_launch(openmpi_environment(0, 0, 10, 4), launch_config("mpi"), 0, "");
        }) ==
        "OMPI_COMM_WORLD_SIZE=10 is not a multiple of OMPI_COMM_WORLD_LOCAL_SIZE=4: meshrun "
        "needs the same number of processes on every node");

  MapEnvironment partial({{"OMPI_COMM_WORLD_SIZE", "4"}});
  CHECK(launch_error([&] { detect_launch(partial, launch_config("auto"), 0, ""); }) ==
        "MPI rank variables are set, so this looks like a process started by mpirun, but these "
        "variables are not set: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK, "
        "OMPI_COMM_WORLD_LOCAL_SIZE (set: OMPI_COMM_WORLD_SIZE='4')");
}

TEST_CASE("the world size message names the MPI variable") {
  CHECK(launch_error([&] {
          detect_launch(openmpi_environment(0, 0, 2, 2), launch_config("mpi", 1, 4), 4,
                        "r.toml:3:1");
        }) ==
        "OMPI_COMM_WORLD_SIZE=2 (from mpi, Open MPI) but the recipe asks for launch.nodes × "
        "procs_per_node = 1 × 4 = 4 at r.toml:3:1");
}

}  // namespace
}  // namespace meshrun
