#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_config;
using launch_test::openmpi_environment;
using launch_test::slurm_environment;

LaunchInfo slurm_task() {
  return detect_launch(slurm_environment(5, 1, 8, 1, 2, "4(x2)", "gpu[07-08]", "123456"),
                       launch_config("slurm"), 8, "");
}

TEST_CASE("text: one aligned key: value line per field, with sources") {
  CHECK(format_launch_info_text(slurm_task()) ==
        "launcher:         slurm\n"
        "rank:             5\n"
        "local_rank:       1\n"
        "world_size:       8\n"
        "local_world_size: 4\n"
        "node_rank:        1\n"
        "nodes:            2\n"
        "master_addr:      gpu07 (first host of SLURM_NODELIST)\n"
        "master_port:      13456 (derived from SLURM_JOB_ID)\n"
        "hosts:            gpu07 gpu08\n"
        "job_id:           123456\n");
}

TEST_CASE("text: MPI shows its implementation and the pending bootstrap") {
  const std::string text = format_launch_info_text(
      detect_launch(openmpi_environment(1, 1, 2, 2), launch_config("mpi"), 2, ""));
  CHECK(
      text.starts_with("launcher:           mpi\n"
                       "mpi_implementation: openmpi\n"
                       "rank:               1\n"));
  CHECK(text.find("master_addr:        (rank 0's address, broadcast over MPI at startup)\n") !=
        std::string::npos);
  CHECK(text.find("master_port:        29500 (recipe)\n") != std::string::npos);
  CHECK(text.find("hosts:              (unknown)\n") != std::string::npos);
  CHECK(text.ends_with("job_id:             (none)\n"));
}

TEST_CASE("text: a long host list is shortened, with its count") {
  LaunchInfo info = slurm_task();
  info.hosts = expand_hostlist("n[01-20]");
  CHECK(format_launch_info_text(info).find(
            "hosts:            n01 n02 n03 n04 ... n19 n20 (20 hosts)\n") != std::string::npos);
  info.hosts = expand_hostlist("n[1-8]");
  CHECK(format_launch_info_text(info).find("hosts:            n1 n2 n3 n4 n5 n6 n7 n8\n") !=
        std::string::npos);
}

TEST_CASE("json: every field, with the full host list") {
  LaunchInfo info = slurm_task();
  info.hosts = expand_hostlist("n[01-20]");
  const std::string text = format_launch_info_json(info);
  CHECK(text.ends_with("}\n"));
  const nlohmann::json json = nlohmann::json::parse(text);
  CHECK(json.at("launcher") == "slurm");
  CHECK(json.at("mpi_implementation") == "");
  CHECK(json.at("rank") == 5);
  CHECK(json.at("local_rank") == 1);
  CHECK(json.at("world_size") == 8);
  CHECK(json.at("local_world_size") == 4);
  CHECK(json.at("node_rank") == 1);
  CHECK(json.at("nodes") == 2);
  CHECK(json.at("master_addr") == "gpu07");
  CHECK(json.at("master_addr_source") == "first host of SLURM_NODELIST");
  CHECK(json.at("master_port") == 13456);
  CHECK(json.at("master_port_source") == "derived from SLURM_JOB_ID");
  CHECK(json.at("needs_mpi_bootstrap") == false);
  CHECK(json.at("hosts").size() == 20);
  CHECK(json.at("hosts").back() == "n20");
  CHECK(json.at("job_id") == "123456");
  CHECK(json.size() == 15);
}

TEST_CASE("json: the MPI bootstrap is a flag and the address is empty") {
  const nlohmann::json json = nlohmann::json::parse(format_launch_info_json(
      detect_launch(openmpi_environment(0, 0, 1, 1), launch_config("mpi"), 1, "")));
  CHECK(json.at("needs_mpi_bootstrap") == true);
  CHECK(json.at("master_addr") == "");
  CHECK(json.at("mpi_implementation") == "openmpi");
  CHECK(json.at("hosts").empty());
}

TEST_CASE("json: environment bytes that are not UTF-8 are replaced, not a JSON error") {
  // Found by fuzz/launch_fuzz.cpp (fuzz/regressions/launch/hostlist-not-utf8):
  // SLURM_NODELIST "0\xb8" made `meshrun env --json` throw nlohmann's type_error.
  MapEnvironment environment = slurm_environment(0, 0, 1, 0, 1, "1", "0\xb8", "12\xff");
  environment.set("MASTER_PORT", "29500");  // else the job id must be a number
  const LaunchInfo info = detect_launch(environment, launch_config("slurm"), 1, "");
  REQUIRE(info.hosts == std::vector<std::string>{"0\xb8"});
  const nlohmann::json json = nlohmann::json::parse(format_launch_info_json(info));
  CHECK(json.at("hosts").at(0) == "0\xef\xbf\xbd");
  CHECK(json.at("master_addr") == "0\xef\xbf\xbd");
  CHECK(json.at("job_id") == "12\xef\xbf\xbd");
}

}  // namespace
}  // namespace meshrun
