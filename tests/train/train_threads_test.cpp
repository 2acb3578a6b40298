// The intra-op team's governor: it shrinks at once to the cores other
// processes leave, grows back after they stay free, and backs off when
// growing keeps failing.
#include <ATen/Parallel.h>
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "meshrun/train/train_threads.hpp"

namespace meshrun::train_detail {
namespace {

CpuShare share(double cores, double foreign) { return CpuShare{cores, foreign}; }

TEST_CASE("a team that has its cores keeps them; a little noise costs no thread") {
  TeamGovernor governor(2);
  CHECK(governor.threads() == 2);
  for (int i = 0; i < 20; ++i) CHECK(governor.observe(share(2, i % 2 ? 0.0 : 0.2)) == 2);
}

TEST_CASE("a busy neighbour shrinks the team at once, and its leaving grows it back") {
  TeamGovernor governor(2);
  // With its team running, a spinning neighbour shows as about 0.7 cores.
  CHECK(governor.observe(share(2, 0.7)) == 1);
  // Alone on its thread beside the neighbour: a whole core taken.
  for (int i = 0; i < 5; ++i) CHECK(governor.observe(share(2, 1.0)) == 1);
  CHECK(governor.observe(share(2, 0.05)) == 2);
  CHECK(governor.observe(share(2, 0.05)) == 2);
}

TEST_CASE("a wide team shrinks by the cores taken, within [1, its size]") {
  TeamGovernor governor(16);
  CHECK(governor.observe(share(16, 3.0)) == 13);
  CHECK(governor.observe(share(16, 40.0)) == 1);
  CHECK(governor.observe(share(64, 0.0)) == 16);  // more cores than the team: never more than configured
  TeamGovernor lone(1);
  CHECK(lone.observe(share(2, 0.0)) == 1);
  CHECK(lone.observe(share(2, 2.0)) == 1);
}

TEST_CASE("growing that fails at once doubles the wait, up to 32 intervals; a team that held resets it") {
  TeamGovernor governor(2);
  CHECK(governor.observe(share(2, 1.0)) == 1);
  CHECK(governor.probe_after() == 1);
  int expected_wait = 1;
  for (int round = 0; round < 8; ++round) {
    // Free for one interval less than the wait: still one thread.
    for (int i = 1; i < expected_wait; ++i) CHECK(governor.observe(share(2, 0.0)) == 1);
    CHECK(governor.observe(share(2, 0.0)) == 2);
    CHECK(governor.observe(share(2, 0.8)) == 1);  // the neighbour was only resting
    expected_wait = std::min(expected_wait * 2, 32);
    CHECK(governor.probe_after() == expected_wait);
  }
  // Interrupted freedom starts the count again.
  for (int i = 1; i < 32; ++i) governor.observe(share(2, 0.0));
  CHECK(governor.observe(share(2, 1.0)) == 1);
  for (int i = 1; i < 32; ++i) CHECK(governor.observe(share(2, 0.0)) == 1);
  CHECK(governor.observe(share(2, 0.0)) == 2);
  // Held for a while, then new contention: the next wait is one interval.
  for (int i = 0; i < 10; ++i) CHECK(governor.observe(share(2, 0.0)) == 2);
  CHECK(governor.observe(share(2, 1.0)) == 1);
  CHECK(governor.probe_after() == 1);
  CHECK(governor.observe(share(2, 0.0)) == 2);
}

TEST_CASE("the thread count: MESHRUN_THREADS, then OMP_NUM_THREADS, else the cores shared; a bad count names its variable") {
  LaunchInfo launch;
  launch.local_world_size = 2;
  CHECK(training_threads(launch, MapEnvironment{}, 8) == 4);
  CHECK(training_threads(launch, MapEnvironment{{"OMP_NUM_THREADS", "3"}}, 8) == 3);
  CHECK(training_threads(launch, MapEnvironment{{"OMP_NUM_THREADS", "6,2"}}, 8) == 6);  // nested levels: the first
  CHECK(training_threads(launch, MapEnvironment({{"OMP_NUM_THREADS", "3"}, {"MESHRUN_THREADS", "5"}}), 8) == 5);
  CHECK(training_threads(launch, MapEnvironment{{"MESHRUN_THREADS", ""}}, 8) == 4);  // empty: unset
  CHECK(training_threads(launch, MapEnvironment{{"MESHRUN_THREADS", "32"}}, 8) == 32);
  for (const auto& [variable, value] : std::vector<std::pair<std::string, std::string>>{
           {"MESHRUN_THREADS", "x"}, {"MESHRUN_THREADS", "0"}, {"MESHRUN_THREADS", "-2"}, {"MESHRUN_THREADS", "33"},
           {"MESHRUN_THREADS", "100000"}, {"MESHRUN_THREADS", "4 "}, {"OMP_NUM_THREADS", "many"}}) {
    CAPTURE(variable);
    CAPTURE(value);
    const std::string wanted = variable + "='" + value + "': CPU threads per process must be a whole number from 1 to 32";
    CHECK_THROWS_WITH_AS(training_threads(launch, MapEnvironment{{variable, value}}, 8),
                         doctest::Contains(wanted.c_str()), LaunchEnvError);
  }
}

TEST_CASE("no governor runs for a GPU job or a one-thread process") {
  if (std::getenv("MESHRUN_THREADS") || std::getenv("OMP_NUM_THREADS")) return;  // the count is the user's then
  const int before = at::get_num_threads();
  LaunchInfo launch;
  launch.local_world_size = 1;
  set_training_threads(launch, /*cpu_device=*/false);
  CHECK(adapt_training_threads() == 0);
  launch.local_world_size = 1 << 20;  // cores ÷ processes rounds to one thread
  set_training_threads(launch, /*cpu_device=*/true);
  CHECK(at::get_num_threads() == 1);
  CHECK(adapt_training_threads() == 0);
  at::set_num_threads(before);
}

}  // namespace
}  // namespace meshrun::train_detail
