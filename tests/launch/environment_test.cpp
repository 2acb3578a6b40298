#include <doctest/doctest.h>

#include <cstdlib>

#include "meshrun/launch/env.hpp"

namespace meshrun {
namespace {

TEST_CASE("ProcessEnvironment reads this process's variables") {
  const char* name = "MESHRUN_ENVIRONMENT_TEST_VARIABLE";
  ::unsetenv(name);
  ProcessEnvironment environment;
  CHECK_FALSE(environment.get(name).has_value());

  ::setenv(name, "value with spaces", 1);
  CHECK(environment.get(name) == "value with spaces");

  ::setenv(name, "", 1);
  CHECK(environment.get(name) == "");  // set but empty is still set at this level

  ::unsetenv(name);
  CHECK_FALSE(environment.get(name).has_value());
}

TEST_CASE("ProcessEnvironment takes names that are not NUL-terminated") {
  const char* name = "MESHRUN_ENVIRONMENT_TEST_PREFIX";
  ::setenv(name, "whole", 1);
  ::setenv("MESHRUN_ENVIRONMENT_TEST", "prefix", 1);
  const std::string_view whole_name(name);
  ProcessEnvironment environment;
  CHECK(environment.get(whole_name.substr(0, whole_name.size() - 7)) == "prefix");
  ::unsetenv(name);
  ::unsetenv("MESHRUN_ENVIRONMENT_TEST");
}

TEST_CASE("MapEnvironment holds, replaces and removes variables") {
  MapEnvironment environment({{"RANK", "3"}});
  CHECK(environment.get("RANK") == "3");
  CHECK_FALSE(environment.get("WORLD_SIZE").has_value());

  environment.set("RANK", "4");
  environment.set("WORLD_SIZE", "8");
  CHECK(environment.get("RANK") == "4");
  CHECK(environment.get("WORLD_SIZE") == "8");
  CHECK(environment.variables().size() == 2);

  environment.unset("RANK");
  environment.unset("NEVER_SET");
  CHECK_FALSE(environment.get("RANK").has_value());
  CHECK(environment.variables().size() == 1);
}

TEST_CASE("MapEnvironment takes a whole map") {
  MapEnvironment environment(
      std::map<std::string, std::string, std::less<>>{{"A", "1"}, {"B", "2"}});
  CHECK(environment.get("A") == "1");
  CHECK(environment.get("B") == "2");
}

}  // namespace
}  // namespace meshrun
