// A Runtime whose world is this process alone (launcher "single"), for unit
// tests of code that takes groups: collectives over it return at once.
#pragma once

#include <chrono>
#include <memory>

#include "meshrun/dist/dist.hpp"

namespace meshrun::test {

inline std::unique_ptr<Runtime> world_of_one() {
  LaunchInfo launch;
  launch.launcher = "single";
  launch.master_addr = "127.0.0.1";
  launch.master_port = 29500;  // unused: a world of one takes any free port
  DistOptions options;
  options.timeout = std::chrono::seconds(10);
  return Runtime::init(launch, options);
}

}  // namespace meshrun::test
