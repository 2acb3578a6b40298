// ClusterShape::parse and ClusterShape::from_recipe.
#include <doctest/doctest.h>

#include "meshrun/plan/plan.hpp"

using namespace meshrun;

namespace {

ClusterShape parsed(const std::string& text) {
  std::string error;
  auto cluster = ClusterShape::parse(text, error);
  INFO(text << ": " << error);
  REQUIRE(cluster);
  CHECK(error.empty());
  return *cluster;
}

std::string parse_error(const std::string& text) {
  std::string error;
  CHECK_FALSE(ClusterShape::parse(text, error));
  return error;
}

}  // namespace

TEST_CASE("cluster strings") {
  ClusterShape a = parsed("4x8");
  CHECK(a.nodes == 4);
  CHECK(a.procs_per_node == 8);
  CHECK(a.device == DeviceKind::cuda);
  CHECK(a.memory_gb == 80);  // cuda without a size: the 80 GiB default, as in [launch]
  CHECK(a.world_size() == 32);

  ClusterShape b = parsed("4x8:cuda");
  CHECK(b.device == DeviceKind::cuda);
  CHECK(b.memory_gb == 80);

  ClusterShape c = parsed("4x8:cuda:40");
  CHECK(c.memory_gb == 40);

  ClusterShape d = parsed("1x2:cpu:16");
  CHECK(d.nodes == 1);
  CHECK(d.procs_per_node == 2);
  CHECK(d.device == DeviceKind::cpu);
  CHECK(d.memory_gb == 16);

  CHECK(parsed("1x2:cpu").memory_gb == 0);  // unknown
  CHECK(parsed("2X4:cuda:23.5").memory_gb == 23.5);
}

TEST_CASE("bad cluster strings say what is wrong") {
  CHECK(parse_error("").find("NODESxPROCS") != std::string::npos);
  CHECK(parse_error("48").find("NODESxPROCS") != std::string::npos);
  CHECK(parse_error("0x8").find("node count \"0\"") != std::string::npos);
  CHECK(parse_error("4x0").find("processes per node \"0\"") != std::string::npos);
  CHECK(parse_error("-1x8").find("node count") != std::string::npos);
  CHECK(parse_error("ax8").find("node count \"a\"") != std::string::npos);
  CHECK(parse_error("4x8x2").find("processes per node \"8x2\"") != std::string::npos);
  CHECK(parse_error("4x8:tpu").find("unknown device \"tpu\"") != std::string::npos);
  CHECK(parse_error("4x8:").find("unknown device \"\"") != std::string::npos);
  CHECK(parse_error("4x8:cuda:0").find("memory \"0\"") != std::string::npos);
  CHECK(parse_error("4x8:cuda:lots").find("memory \"lots\"") != std::string::npos);
  CHECK(parse_error("4x8:cuda:80:1").find("too many") != std::string::npos);
  // Past the bounds: the world size stays an int, a device's bytes an int64.
  CHECK(parse_error("8x8:cuda:1e308").find("memory \"1e308\"") != std::string::npos);
  CHECK(parse_error("8x8:cuda:1048577").find("up to 1048576") != std::string::npos);
  CHECK(parse_error("100000x8").find("node count \"100000\" is not an integer from 1 to 65536") != std::string::npos);
  CHECK(parse_error("1x2000").find("processes per node \"2000\"") != std::string::npos);
  CHECK(parse_error("99999999999x8").find("node count") != std::string::npos);
  std::string error;
  CHECK(ClusterShape::parse("65536x1024:cuda:1048576", error));
}

TEST_CASE("the cluster of a recipe's [launch] section") {
  Recipe recipe;
  recipe.launch.nodes = 2;
  recipe.launch.procs_per_node = 4;
  ClusterShape cuda = ClusterShape::from_recipe(recipe);
  CHECK(cuda.nodes == 2);
  CHECK(cuda.procs_per_node == 4);
  CHECK(cuda.device == DeviceKind::cuda);
  CHECK(cuda.memory_gb == 80);

  // The memory of a visible GPU (plan and lint pass it) replaces the
  // 80 GiB default, never a figure the recipe states.
  CHECK(ClusterShape::from_recipe(recipe, 139.8).memory_gb == 139.8);

  recipe.launch.memory_gb = 24;
  CHECK(ClusterShape::from_recipe(recipe).memory_gb == 24);
  CHECK(ClusterShape::from_recipe(recipe, 139.8).memory_gb == 24);

  recipe.launch.device = "cpu";
  recipe.launch.memory_gb = 0;
  ClusterShape cpu = ClusterShape::from_recipe(recipe);
  CHECK(cpu.device == DeviceKind::cpu);
  CHECK(cpu.memory_gb == 0);
  CHECK(ClusterShape::from_recipe(recipe, 139.8).memory_gb == 0);
}
