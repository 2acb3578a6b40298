// Reading single variables: numbers, ports, empty values and missing ones,
// seen through detect_launch.
#include <doctest/doctest.h>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_config;
using launch_test::launch_error;
using launch_test::torchrun_environment;

std::string torchrun_error_with(std::string name, std::string value) {
  MapEnvironment environment = torchrun_environment(1, 1, 4, 2, 0);
  environment.set(std::move(name), std::move(value));
  return launch_error([&] { detect_launch(environment, launch_config("torchrun"), 0, ""); });
}

TEST_CASE("a non-numeric rank names the variable and quotes its value") {
  CHECK(torchrun_error_with("RANK", "abc") == "RANK='abc' is not a number");
  CHECK(torchrun_error_with("LOCAL_RANK", "1.5") == "LOCAL_RANK='1.5' is not a number");
  CHECK(torchrun_error_with("RANK", " 1") == "RANK=' 1' is not a number");
  CHECK(torchrun_error_with("RANK", "1 ") == "RANK='1 ' is not a number");
  CHECK(torchrun_error_with("RANK", "+1") == "RANK='+1' is not a number");
  CHECK(torchrun_error_with("GROUP_RANK", "zero") == "GROUP_RANK='zero' is not a number");
}

TEST_CASE("negative and oversized numbers are refused") {
  CHECK(torchrun_error_with("RANK", "-1") == "RANK='-1' is negative");
  CHECK(torchrun_error_with("LOCAL_RANK", "-99999999999999999999999") ==
        "LOCAL_RANK='-99999999999999999999999' is negative");
  CHECK(torchrun_error_with("RANK", "2147483648") == "RANK='2147483648' is too large");
  CHECK(torchrun_error_with("WORLD_SIZE", "99999999999999999999999") ==
        "WORLD_SIZE='99999999999999999999999' is too large");
}

TEST_CASE("sizes must be at least 1") {
  CHECK(torchrun_error_with("WORLD_SIZE", "0") == "WORLD_SIZE='0' must be at least 1");
  CHECK(torchrun_error_with("LOCAL_WORLD_SIZE", "0") == "LOCAL_WORLD_SIZE='0' must be at least 1");
}

TEST_CASE("MASTER_PORT must be a port number") {
  for (const char* port : {"http", "0", "65536", "-1", "29500x", "99999999999"}) {
    CAPTURE(port);
    CHECK(torchrun_error_with("MASTER_PORT", port) ==
          "MASTER_PORT='" + std::string(port) + "' is not a port number (1-65535)");
  }
  MapEnvironment environment = torchrun_environment(0, 0, 1, 1, 0);
  environment.set("MASTER_PORT", "65535");
  CHECK(detect_launch(environment, launch_config("torchrun"), 1, "").master_port == 65535);
  environment.set("MASTER_PORT", "1");
  CHECK(detect_launch(environment, launch_config("torchrun"), 1, "").master_port == 1);
}

TEST_CASE("a variable set to the empty string counts as not set") {
  MapEnvironment environment = torchrun_environment(1, 1, 4, 2, 0);
  environment.set("MASTER_ADDR", "");
  CHECK(launch_error([&] { detect_launch(environment, launch_config("torchrun"), 0, ""); }) ==
        "launch.type = \"torchrun\" (start meshrun with torchrun), but this variable is not "
        "set: MASTER_ADDR (set: RANK='1', LOCAL_RANK='1', WORLD_SIZE='4', "
        "LOCAL_WORLD_SIZE='2', MASTER_PORT='29400')");

  // Empty launcher variables do not make a launcher present either.
  MapEnvironment empty_values({{"RANK", ""}, {"WORLD_SIZE", ""}, {"SLURM_PROCID", ""}});
  CHECK(detect_launch(empty_values, launch_config("auto"), 1, "").launcher == "single");
}

TEST_CASE("every missing variable is named at once") {
  MapEnvironment environment({{"RANK", "0"}, {"MASTER_ADDR", "host"}});
  CHECK(launch_error([&] { detect_launch(environment, launch_config("auto"), 0, ""); }) ==
        "RANK or WORLD_SIZE is set, so this looks like a torchrun worker, but these variables "
        "are not set: LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_PORT (set: RANK='0', "
        "MASTER_ADDR='host')");
}

TEST_CASE("the recipe's master port is checked when it is used") {
  MapEnvironment no_launcher;
  CHECK(launch_error([&] { detect_launch(no_launcher, launch_config("auto", 1, 1, 0), 1, ""); }) ==
        "launch.master_port = 0 is not a port number (1-65535)");
  CHECK(launch_error([&] {
          detect_launch(no_launcher, launch_config("auto", 1, 1, 70000), 1, "");
        }) == "launch.master_port = 70000 is not a port number (1-65535)");
  // torchrun brings its own port, so the recipe's is not read.
  CHECK(detect_launch(torchrun_environment(0, 0, 1, 1, 0), launch_config("auto", 1, 1, 0), 1, "")
            .master_port == 29400);
}

}  // namespace
}  // namespace meshrun
