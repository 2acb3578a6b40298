// PhaseTimers and their scoped timers.
#include "meshrun/metrics/metrics.hpp"

namespace meshrun {

PhaseTimers::Scope::Scope(PhaseTimers& timers, std::string name)
    : timers_(&timers), name_(std::move(name)), start_(timers.clock_->now_seconds()) {
  timers_->add(name_, 0.0);  // listed in the order phases start, outer before nested
}

PhaseTimers::Scope::Scope(Scope&& other) noexcept
    : timers_(std::exchange(other.timers_, nullptr)), name_(std::move(other.name_)), start_(other.start_) {}

void PhaseTimers::Scope::stop() {
  if (timers_ == nullptr) return;
  timers_->add(name_, timers_->clock_->now_seconds() - start_);
  timers_ = nullptr;
}

void PhaseTimers::add(std::string_view name, double seconds) {
  for (auto& [phase, total] : totals_) {
    if (phase == name) {
      total += seconds;
      return;
    }
  }
  totals_.emplace_back(std::string(name), seconds);
}

double PhaseTimers::seconds(std::string_view name) const {
  for (const auto& [phase, total] : totals_) {
    if (phase == name) return total;
  }
  return 0.0;
}

void PhaseTimers::add_to(MetricsRecord& record, std::string_view prefix) const {
  for (const auto& [phase, total] : totals_) record.set(std::string(prefix) + phase, total);
}

}  // namespace meshrun
