// Learning-rate schedules at their boundary steps.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "meshrun/error.hpp"
#include "meshrun/train/lr_schedule.hpp"

namespace meshrun {
namespace {

TEST_CASE("warmup rises linearly to the base rate at its last step") {
  const auto schedule = LrSchedule::make(LrScheduleKind::cosine, 1.0, 100, 0.1, 0.1);
  CHECK(schedule.warmup_steps == 10);
  CHECK(schedule.lr(0) == doctest::Approx(0.1));
  CHECK(schedule.lr(4) == doctest::Approx(0.5));
  CHECK(schedule.lr(9) == doctest::Approx(1.0));
  CHECK(schedule.lr(10) == doctest::Approx(1.0));  // decay starts at the base rate
}

TEST_CASE("cosine decays to min_lr_ratio at total_steps") {
  const auto schedule = LrSchedule::make(LrScheduleKind::cosine, 2.0, 110, 10.0 / 110.0, 0.1);
  REQUIRE(schedule.warmup_steps == 10);
  CHECK(schedule.lr(60) == doctest::Approx(0.2 + 1.8 * 0.5));  // half way
  CHECK(schedule.lr(35) == doctest::Approx(0.2 + 1.8 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25))));
  CHECK(schedule.lr(109) > 0.2);
  CHECK(schedule.lr(109) < 0.21);
  CHECK(schedule.lr(110) == doctest::Approx(0.2));
  CHECK(schedule.lr(500) == doctest::Approx(0.2));
}

TEST_CASE("linear decays in equal steps to the end point") {
  const auto schedule = LrSchedule::make(LrScheduleKind::linear, 1.0, 10, 0.0, 0.0);
  CHECK(schedule.warmup_steps == 0);
  CHECK(schedule.lr(0) == doctest::Approx(1.0));
  CHECK(schedule.lr(5) == doctest::Approx(0.5));
  CHECK(schedule.lr(9) == doctest::Approx(0.1));
  CHECK(schedule.lr(10) == doctest::Approx(0.0));
}

TEST_CASE("constant stays at the base rate after warmup") {
  const auto schedule = LrSchedule::make(LrScheduleKind::constant, 3e-4, 50, 0.04, 0.1);
  CHECK(schedule.warmup_steps == 2);
  CHECK(schedule.lr(0) == doctest::Approx(1.5e-4));
  CHECK(schedule.lr(1) == doctest::Approx(3e-4));
  CHECK(schedule.lr(49) == doctest::Approx(3e-4));
  CHECK(schedule.lr(1000) == doctest::Approx(3e-4));
}

TEST_CASE("warmup_ratio rounds up to whole steps; a full warmup never decays") {
  CHECK(LrSchedule::make(LrScheduleKind::cosine, 1, 30, 0.1, 0).warmup_steps == 3);
  CHECK(LrSchedule::make(LrScheduleKind::cosine, 1, 7, 0.03, 0).warmup_steps == 1);
  const auto all_warmup = LrSchedule::make(LrScheduleKind::linear, 1, 4, 1.0, 0);
  CHECK(all_warmup.lr(3) == doctest::Approx(1.0));
}

TEST_CASE("bad schedule settings are refused with the key named") {
  CHECK((lr_schedule_kind_from_name("linear") == LrScheduleKind::linear));
  CHECK_THROWS_WITH_AS(lr_schedule_kind_from_name("step"), doctest::Contains("lr_scheduler 'step'"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule::make(LrScheduleKind::cosine, 1, 0, 0, 0), doctest::Contains("total_steps"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule::make(LrScheduleKind::cosine, 1, 5, 1.5, 0), doctest::Contains("warmup_ratio"),
                       ConfigError);
  CHECK_THROWS_WITH_AS(LrSchedule::make(LrScheduleKind::cosine, 1, 5, 0, -1), doctest::Contains("min_lr_ratio"),
                       ConfigError);
  CHECK_THROWS_AS(LrSchedule::make(LrScheduleKind::cosine, 1, 5, 0, 0).lr(-1), std::logic_error);
}

}  // namespace
}  // namespace meshrun
