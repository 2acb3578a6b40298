// Learning-rate schedules (include/meshrun/train/lr_schedule.hpp).
#include "meshrun/train/lr_schedule.hpp"

#include <cmath>
#include <numbers>
#include <stdexcept>

#include "meshrun/error.hpp"

namespace meshrun {

LrScheduleKind lr_schedule_kind_from_name(std::string_view name) {
  if (const auto kind = lr_schedule_kind_named(name)) return *kind;
  throw ConfigError("unknown lr_scheduler '" + std::string(name) + "' (cosine, linear or constant)");
}

LrSchedule LrSchedule::make(LrScheduleKind kind, double base_lr, std::int64_t total_steps, double warmup_ratio,
                            double min_lr_ratio) {
  if (total_steps < 1)
    throw ConfigError("learning-rate schedule: total_steps must be at least 1, got " +
                      std::to_string(total_steps));
  if (!(warmup_ratio >= 0 && warmup_ratio <= 1))
    throw ConfigError("learning-rate schedule: warmup_ratio must lie in [0, 1], got " +
                      std::to_string(warmup_ratio));
  if (!(min_lr_ratio >= 0 && min_lr_ratio <= 1))
    throw ConfigError("learning-rate schedule: min_lr_ratio must lie in [0, 1], got " +
                      std::to_string(min_lr_ratio));
  if (!(base_lr >= 0)) throw ConfigError("learning-rate schedule: negative learning_rate");
  LrSchedule schedule;
  schedule.kind = kind;
  schedule.base_lr = base_lr;
  schedule.total_steps = total_steps;
  // The small tolerance keeps 0.1 * 30 at 3 steps despite rounding.
  schedule.warmup_steps = static_cast<std::int64_t>(std::ceil(warmup_ratio * static_cast<double>(total_steps) - 1e-9));
  schedule.min_lr_ratio = min_lr_ratio;
  return schedule;
}

double LrSchedule::lr(std::int64_t step) const {
  if (step < 0) throw std::logic_error("learning-rate schedule: negative step " + std::to_string(step));
  if (step < warmup_steps) return base_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == LrScheduleKind::constant) return base_lr;
  const double min_lr = base_lr * min_lr_ratio;
  if (step >= total_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
  if (kind == LrScheduleKind::linear) return min_lr + (base_lr - min_lr) * (1.0 - progress);
  return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace meshrun
