#include <doctest/doctest.h>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_config;
using launch_test::launch_error;
using launch_test::openmpi_environment;

// What horovodrun's Gloo controller sets for one process (hosts a:4,b:4).
MapEnvironment horovod_gloo_environment(int rank, int local_rank, int size, int local_size, int cross_rank,
                                        int cross_size) {
  return MapEnvironment({{"HOROVOD_RANK", std::to_string(rank)},
                         {"HOROVOD_SIZE", std::to_string(size)},
                         {"HOROVOD_LOCAL_RANK", std::to_string(local_rank)},
                         {"HOROVOD_LOCAL_SIZE", std::to_string(local_size)},
                         {"HOROVOD_CROSS_RANK", std::to_string(cross_rank)},
                         {"HOROVOD_CROSS_SIZE", std::to_string(cross_size)},
                         {"HOROVOD_HOSTNAME", "b"},
                         {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.9"},
                         {"HOROVOD_GLOO_RENDEZVOUS_PORT", "41234"},
                         {"HOROVOD_CONTROLLER", "gloo"},
                         {"HOROVOD_CPU_OPERATIONS", "gloo"}});
}

TEST_CASE("a horovodrun (Gloo) process learns its place from HOROVOD_*") {
  MapEnvironment environment = horovod_gloo_environment(6, 2, 8, 4, 1, 2);
  environment.set("MASTER_ADDR", "a");
  LaunchInfo info = detect_launch(environment, launch_config("auto", 2, 4, 29600), 8, "");
  CHECK(info.launcher == "horovod");
  CHECK(info.mpi_implementation.empty());
  CHECK(info.rank == 6);
  CHECK(info.local_rank == 2);
  CHECK(info.world_size == 8);
  CHECK(info.local_world_size == 4);
  CHECK(info.node_rank == 1);
  CHECK(info.nodes == 2);
  CHECK(info.master_addr == "a");
  CHECK(info.master_addr_source == "MASTER_ADDR");
  CHECK(info.master_port == 29600);
  CHECK(info.master_port_source == "recipe");
  CHECK_FALSE(info.needs_mpi_bootstrap);
  CHECK(present_launcher(environment) == "horovod");
  // The explicit type reads the same variables.
  CHECK(detect_launch(environment, launch_config("horovod", 2, 4), 8, "").rank == 6);
}

TEST_CASE("one horovodrun host meets on loopback; several need MASTER_ADDR") {
  LaunchInfo info = detect_launch(horovod_gloo_environment(1, 1, 2, 2, 0, 1), launch_config("horovod", 1, 2), 2, "");
  CHECK(info.master_addr == "127.0.0.1");
  CHECK(info.master_addr_source == "one host (HOROVOD_LOCAL_SIZE = HOROVOD_SIZE)");
  const std::string message = launch_error(
      [] { detect_launch(horovod_gloo_environment(6, 2, 8, 4, 1, 2), launch_config("horovod", 2, 4), 8, ""); });
  CHECK(message.find("spans 2 hosts, but MASTER_ADDR is not set") != std::string::npos);
  CHECK(message.find("HOROVOD_GLOO_RENDEZVOUS_ADDR='10.0.0.9' is horovodrun's own server") != std::string::npos);
  CHECK(message.find("MASTER_ADDR=<the first host> horovodrun") != std::string::npos);
}

TEST_CASE("horovodrun's variables win over the SLURM allocation it runs in") {
  MapEnvironment environment = horovod_gloo_environment(1, 1, 2, 2, 0, 1);
  environment.set("SLURM_PROCID", "0");
  environment.set("SLURM_JOB_ID", "77");
  CHECK(detect_launch(environment, launch_config("auto", 1, 2), 2, "").launcher == "horovod");
  CHECK(present_launcher(environment) == "horovod");
}

TEST_CASE("missing Horovod variables are named, with the ones that are set") {
  MapEnvironment environment = horovod_gloo_environment(1, 1, 2, 2, 0, 1);
  environment.unset("HOROVOD_LOCAL_SIZE");
  environment.unset("HOROVOD_CROSS_RANK");
  const std::string message =
      launch_error([&] { detect_launch(environment, launch_config("auto", 1, 2), 2, ""); });
  CHECK(message.find("these variables are not set: HOROVOD_LOCAL_SIZE, HOROVOD_CROSS_RANK") != std::string::npos);
  CHECK(message.find("HOROVOD_RANK='1'") != std::string::npos);

  MapEnvironment rendezvous_only({{"HOROVOD_GLOO_RENDEZVOUS_ADDR", "10.0.0.9"}, {"HOROVOD_GLOO_RENDEZVOUS_PORT", "1"}});
  CHECK(launch_error([&] { detect_launch(rendezvous_only, launch_config("auto"), 1, ""); })
            .find("these variables are not set: HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK") != std::string::npos);

  environment = horovod_gloo_environment(1, 1, 2, 2, 0, 1);
  environment.unset("HOROVOD_GLOO_RENDEZVOUS_PORT");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto", 1, 2), 2, ""); }) ==
        "HOROVOD_GLOO_RENDEZVOUS_ADDR='10.0.0.9' is set but HOROVOD_GLOO_RENDEZVOUS_PORT is not: horovodrun sets "
        "both");
  environment.set("HOROVOD_GLOO_RENDEZVOUS_PORT", "http");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto", 1, 2), 2, ""); }) ==
        "HOROVOD_GLOO_RENDEZVOUS_PORT='http' is not a port number (1-65535)");
}

TEST_CASE("conflicting Horovod variables are an error naming them") {
  MapEnvironment environment = horovod_gloo_environment(1, 1, 2, 2, 0, 1);
  environment.set("HOROVOD_CROSS_SIZE", "3");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto", 1, 2), 2, ""); }) ==
        "HOROVOD_CROSS_SIZE='3' disagrees with nodes 1 (HOROVOD_SIZE / HOROVOD_LOCAL_SIZE): every host must run "
        "the same number of processes (horovodrun -H a:4,b:4)");

  environment = horovod_gloo_environment(1, 1, 2, 2, 0, 1);
  environment.set("HOROVOD_CONTROLLER", "nccl");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto", 1, 2), 2, ""); }) ==
        "HOROVOD_CONTROLLER='nccl' is neither 'gloo' nor 'mpi'");
  environment.set("HOROVOD_CONTROLLER", "mpi");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto", 1, 2), 2, ""); })
            .find("names the MPI controller, but Horovod's Gloo variables are set too") != std::string::npos);

  // Gloo's and MPI's numbers for one process disagree.
  environment = horovod_gloo_environment(1, 1, 2, 2, 0, 1);
  environment.set("OMPI_COMM_WORLD_RANK", "0");
  environment.set("OMPI_COMM_WORLD_SIZE", "2");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto", 1, 2), 2, ""); }) ==
        "HOROVOD_RANK='1' and OMPI_COMM_WORLD_RANK='0' disagree: this process cannot be both; unset the variables "
        "of the launcher that did not start it");
  environment.set("OMPI_COMM_WORLD_RANK", "1");
  CHECK(detect_launch(environment, launch_config("auto", 1, 2), 2, "").launcher == "horovod");

  // A host's ranks out of order (rank 1 as host 1's first process).
  environment = horovod_gloo_environment(1, 0, 4, 2, 1, 2);
  environment.set("MASTER_ADDR", "a");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto", 2, 2), 4, ""); })
            .find("horovodrun -H a:4,b:4") != std::string::npos);
}

TEST_CASE("under horovodrun's MPI controller the MPI variables describe the process") {
  MapEnvironment environment = openmpi_environment(3, 1, 4, 2);
  environment.set("HOROVOD_CONTROLLER", "mpi");
  LaunchInfo info = detect_launch(environment, launch_config("auto", 2, 2, 29700), 4, "");
  CHECK(info.launcher == "horovod");
  CHECK(info.mpi_implementation == "openmpi");
  CHECK(info.rank == 3);
  CHECK(info.node_rank == 1);
  CHECK(info.needs_mpi_bootstrap);  // rank 0's address comes over MPI, as under mpirun
  CHECK(present_launcher(environment) == "horovod");

  // launch.type = "horovod" reads MPI's variables without the marker too.
  environment.unset("HOROVOD_CONTROLLER");
  CHECK(detect_launch(environment, launch_config("horovod", 2, 2), 4, "").launcher == "horovod");
  CHECK(detect_launch(environment, launch_config("auto", 2, 2), 4, "").launcher == "mpi");

  // The world size error names the MPI variable.
  CHECK(launch_error([&] { detect_launch(environment, launch_config("horovod", 1, 2), 2, ""); })
            .starts_with("OMPI_COMM_WORLD_SIZE=4 (from horovod, MPI controller) but the recipe asks for"));
}

TEST_CASE("launch.type = \"horovod\" without horovodrun says how to start it") {
  CHECK(launch_error([] { detect_launch(MapEnvironment(), launch_config("horovod"), 1, ""); }) ==
        "launch.type = \"horovod\" (start meshrun with horovodrun), but neither Horovod's Gloo variables "
        "(HOROVOD_RANK, HOROVOD_SIZE, ...) nor an MPI job's (OMPI_COMM_WORLD_RANK, MV2_COMM_WORLD_RANK, PMI_RANK) "
        "are set; start meshrun with horovodrun");
  MapEnvironment gloo_marker({{"HOROVOD_CONTROLLER", "gloo"}});
  CHECK(launch_error([&] { detect_launch(gloo_marker, launch_config("horovod"), 1, ""); })
            .find("these variables are not set: HOROVOD_RANK, HOROVOD_SIZE") != std::string::npos);
}

TEST_CASE("a worker of meshrun's Ray job is recognized by MESHRUN_LAUNCHER=ray") {
  MapEnvironment environment = launch_test::environment_of(
      torchrun_environment_for(1, 1, 2, 2, 0, "10.0.0.5", 29501));
  environment.set("MESHRUN_LAUNCHER", "ray");
  environment.set("MESHRUN_RAY_JOB_ID", "raysubmit_abc");
  for (const char* type : {"auto", "ray"}) {
    LaunchInfo info = detect_launch(environment, launch_config(type, 1, 2), 2, "");
    CHECK(info.launcher == "ray");
    CHECK(info.rank == 1);
    CHECK(info.master_addr == "10.0.0.5");
    CHECK(info.job_id == "raysubmit_abc");
  }
  CHECK(present_launcher(environment) == "ray");
  CHECK(launch_error([] { detect_launch(MapEnvironment(), launch_config("ray"), 1, ""); })
            .find("submit the recipe to the cluster with `meshrun submit RECIPE --ray`") != std::string::npos);
  environment.set("MESHRUN_LAUNCHER", "rya");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto", 1, 2), 2, ""); })
            .starts_with("MESHRUN_LAUNCHER='rya' is not a value meshrun sets"));
}

}  // namespace
}  // namespace meshrun
