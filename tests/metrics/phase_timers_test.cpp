// Tests of src/metrics/phase_timers.cpp with a manual clock.
#include <doctest/doctest.h>

#include <stdexcept>

#include "manual_clock.hpp"

namespace meshrun {
namespace {

using metrics_test::ManualClock;

TEST_CASE("scoped timers accumulate per name, listed in the order phases first start") {
  ManualClock clock;
  PhaseTimers timers(clock);
  {
    auto forward = timers.scope("forward");
    clock.advance(0.5);
  }
  {
    auto backward = timers.scope("backward");
    clock.advance(1.0);
    {
      auto comm = timers.scope("all_reduce");  // nested: counted in both
      clock.advance(0.25);
    }
  }
  {
    auto forward = timers.scope("forward");
    clock.advance(0.125);
  }
  CHECK(timers.seconds("forward") == doctest::Approx(0.625));
  CHECK(timers.seconds("backward") == doctest::Approx(1.25));
  CHECK(timers.seconds("all_reduce") == doctest::Approx(0.25));
  CHECK(timers.seconds("optimizer") == 0.0);
  REQUIRE(timers.totals().size() == 3);
  CHECK(timers.totals()[0].first == "forward");
  CHECK(timers.totals()[1].first == "backward");
  CHECK(timers.totals()[2].first == "all_reduce");

  MetricsRecord record(4);
  timers.add_to(record);
  CHECK(record.to_json() == R"({"step":4,"time/forward":0.625,"time/backward":1.25,"time/all_reduce":0.25})");
  timers.reset();
  CHECK(timers.totals().empty());
  CHECK(timers.seconds("forward") == 0.0);
}

TEST_CASE("stop ends a scope early; a moved scope counts once; an exception still counts") {
  ManualClock clock;
  PhaseTimers timers(clock);
  {
    auto data = timers.scope("data");
    clock.advance(1.0);
    data.stop();
    clock.advance(5.0);
  }
  CHECK(timers.seconds("data") == doctest::Approx(1.0));
  {
    auto first = timers.scope("step");
    clock.advance(2.0);
    auto second = std::move(first);
    clock.advance(1.0);
  }
  CHECK(timers.seconds("step") == doctest::Approx(3.0));
  try {
    auto failing = timers.scope("failing");
    clock.advance(0.5);
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
  }
  CHECK(timers.seconds("failing") == doctest::Approx(0.5));
  timers.add("manual", 2.0);
  timers.add("manual", 0.5);
  MetricsRecord record(0);
  timers.add_to(record, "t.");
  CHECK(record.find("t.manual") != nullptr);
  CHECK(std::get<double>(*record.find("t.manual")) == 2.5);
}

}  // namespace
}  // namespace meshrun
