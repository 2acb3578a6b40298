// Tests of src/metrics/throughput.cpp with a manual clock.
#include <doctest/doctest.h>

#include <stdexcept>

#include "manual_clock.hpp"

namespace meshrun {
namespace {

using metrics_test::ManualClock;

TEST_CASE("tokens per second over the window and overall") {
  ManualClock clock;
  ThroughputMeter meter(clock, 2);
  CHECK_FALSE(meter.tokens_per_second());
  CHECK_FALSE(meter.overall_tokens_per_second());
  clock.advance(1.0);
  meter.record(100);  // step 1: 100 tokens in 1 s
  CHECK(*meter.tokens_per_second() == doctest::Approx(100.0));
  clock.advance(2.0);
  meter.record(1000);  // step 2: 1000 tokens in 2 s
  CHECK(*meter.tokens_per_second() == doctest::Approx(1100.0 / 3.0));
  clock.advance(1.0);
  meter.record(300);  // step 3; the window holds steps 2 and 3
  CHECK(*meter.tokens_per_second() == doctest::Approx(1300.0 / 3.0));
  CHECK(*meter.overall_tokens_per_second() == doctest::Approx(1400.0 / 4.0));
  CHECK(meter.total_tokens() == 1400);
  CHECK(meter.steps() == 3);
}

TEST_CASE("restart forgets what came before; no elapsed time gives no rate") {
  ManualClock clock;
  ThroughputMeter meter(clock, 5);
  clock.advance(10.0);
  meter.record(50);
  meter.restart();
  CHECK(meter.steps() == 0);
  CHECK_FALSE(meter.tokens_per_second());
  meter.record(10);  // no time passed
  CHECK_FALSE(meter.tokens_per_second());
  clock.advance(0.5);
  meter.record(40);
  CHECK(*meter.tokens_per_second() == doctest::Approx(100.0));
  CHECK(*meter.overall_tokens_per_second() == doctest::Approx(100.0));
}

TEST_CASE("a window of less than one step is refused; the steady clock moves forward") {
  ManualClock clock;
  CHECK_THROWS_AS(ThroughputMeter(clock, 0), std::logic_error);
  const double before = steady_clock().now_seconds();
  CHECK(steady_clock().now_seconds() >= before);
}

}  // namespace
}  // namespace meshrun
