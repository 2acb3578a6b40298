// complete_mpi_bootstrap in this process: without mpirun, MPI_Init makes a
// singleton, a world of one, which is enough to run the whole bootstrap.
// MPI can be initialized once per process, so every step that initializes
// it is in one test case, in order. Two ranks under a real mpirun are
// tests/integration/check_launchers_test.sh's case_mpi_bootstrap.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <optional>
#include <string>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_config;
using launch_test::launch_error;
using launch_test::openmpi_environment;

// What mpirun -np 1 without MASTER_ADDR gives: a bootstrap is needed.
LaunchInfo world_of_one() {
  return detect_launch(openmpi_environment(0, 0, 1, 1), launch_config("mpi", 1, 1, 29600), 1, "");
}

// Unsets a process variable for the scope, so that the developer's own
// MESHRUN_MASTER_INTERFACE cannot steer the address rule under test.
class UnsetVariable {
 public:
  explicit UnsetVariable(const char* name) : name_(name) {
    if (const char* value = ::getenv(name)) saved_ = value;
    ::unsetenv(name);
  }
  ~UnsetVariable() {
    if (saved_) ::setenv(name_, saved_->c_str(), 1);
  }
  UnsetVariable(const UnsetVariable&) = delete;
  UnsetVariable& operator=(const UnsetVariable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

TEST_CASE("a launch that has its master address needs no MPI bootstrap") {
  LaunchInfo info = world_of_one();
  info.needs_mpi_bootstrap = false;
  info.master_addr = "10.1.2.3";
  info.master_addr_source = "MASTER_ADDR";
  complete_mpi_bootstrap(info);
  CHECK(info.master_addr == "10.1.2.3");
  CHECK(info.master_addr_source == "MASTER_ADDR");
  CHECK(info.master_port == 29600);
  CHECK(info.master_port_source == "recipe");
}

#if defined(MESHRUN_HAVE_MPI) && !MESHRUN_HAVE_MPI

TEST_CASE("a meshrun built without MPI says how to run mpirun jobs") {
  LaunchInfo info = world_of_one();
  CHECK(launch_error([&] { complete_mpi_bootstrap(info); }) ==
        "this meshrun was built without MPI; set MASTER_ADDR and MASTER_PORT for mpirun jobs");
}

#else

TEST_CASE("an MPI world of one bootstraps to loopback and a free port, once per process") {
  UnsetVariable interface_override("MESHRUN_MASTER_INTERFACE");
  LaunchInfo info = world_of_one();
  REQUIRE(info.needs_mpi_bootstrap);
  complete_mpi_bootstrap(info);
  CHECK_FALSE(info.needs_mpi_bootstrap);
  // One node: every rank reaches rank 0 over loopback.
  CHECK(info.master_addr == "127.0.0.1");
  CHECK(info.master_addr_source ==
        "rank 0's address, broadcast over MPI (loopback: every rank runs on rank 0's node)");
  // A free port replaces the recipe's, which was no one's explicit choice
  // for this job.
  CHECK(info.master_port >= 1);
  CHECK(info.master_port <= 65535);
  CHECK(info.master_port_source == "rank 0's free port, broadcast over MPI");

  // The bootstrap finalized MPI, which cannot start again in this process.
  LaunchInfo again = world_of_one();
  CHECK(launch_error([&] { complete_mpi_bootstrap(again); }).find("already finalized") != std::string::npos);
}

#endif

}  // namespace
}  // namespace meshrun
