// Learning-rate schedules of the training engine: linear warmup, then
// cosine or linear decay to min_lr_ratio * base_lr, or a constant rate.
//
// Steps are 0-based optimizer steps: lr(0) is the rate of the first update.
// Warmup covers steps [0, warmup_steps) and rises linearly to base_lr,
// reaching it at the last warmup step: lr(s) = base * (s + 1) / warmup_steps
// (so no step is taken with a zero rate). Decay runs over
// [warmup_steps, total_steps): with progress p = (s - warmup) / (total -
// warmup), cosine gives min + (base - min) * (1 + cos(pi p)) / 2 and linear
// min + (base - min) * (1 - p); a step at or past total_steps gets the end
// point min. warmup_steps = ceil(warmup_ratio * total_steps).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "meshrun/plan/settings.hpp"

namespace meshrun {

// "cosine" | "linear" | "constant" (kLrScheduleKinds); throws ConfigError
// otherwise (a name from outside a recipe: the schema checks the recipe's).
LrScheduleKind lr_schedule_kind_from_name(std::string_view name);

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::constant;
  double base_lr = 1e-5;
  std::int64_t total_steps = 1;
  std::int64_t warmup_steps = 0;
  double min_lr_ratio = 0.0;

  // Throws ConfigError for total_steps < 1, a ratio outside [0, 1] or a
  // negative rate; lr() throws std::logic_error for a negative step.
  static LrSchedule make(LrScheduleKind kind, double base_lr, std::int64_t total_steps, double warmup_ratio,
                         double min_lr_ratio);

  double lr(std::int64_t step) const;
};

}  // namespace meshrun
