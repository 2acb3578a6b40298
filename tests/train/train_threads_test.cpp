// The intra-op team's governor: it shrinks at once to the cores other
// processes leave, grows back after they stay free, and backs off when
// growing keeps failing.
#include <ATen/Parallel.h>
#include <doctest/doctest.h>

#include <cstdlib>

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
