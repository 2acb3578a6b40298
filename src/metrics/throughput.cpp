// The steady clock and ThroughputMeter.
#include <chrono>
#include <stdexcept>
#include <string>

#include "meshrun/metrics/metrics.hpp"

namespace meshrun {

namespace {

class SteadyClock final : public Clock {
 public:
  double now_seconds() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
};

}  // namespace

const Clock& steady_clock() {
  static const SteadyClock clock;
  return clock;
}

ThroughputMeter::ThroughputMeter(const Clock& clock, int window) : clock_(&clock), window_(window) {
  if (window < 1) throw std::logic_error("throughput window must be at least 1 step, got " + std::to_string(window));
  restart();
}

void ThroughputMeter::restart() {
  start_ = clock_->now_seconds();
  total_tokens_ = 0;
  steps_ = 0;
  marks_.assign(1, {start_, 0});
}

void ThroughputMeter::record(int64_t tokens) {
  total_tokens_ += tokens;
  ++steps_;
  marks_.emplace_back(clock_->now_seconds(), total_tokens_);
  while (static_cast<int>(marks_.size()) > window_ + 1) marks_.pop_front();
}

namespace {

std::optional<double> rate(int64_t tokens, double seconds) {
  if (!(seconds > 0)) return std::nullopt;
  return static_cast<double>(tokens) / seconds;
}

}  // namespace

std::optional<double> ThroughputMeter::tokens_per_second() const {
  if (steps_ == 0) return std::nullopt;
  return rate(marks_.back().second - marks_.front().second, marks_.back().first - marks_.front().first);
}

std::optional<double> ThroughputMeter::overall_tokens_per_second() const {
  if (steps_ == 0) return std::nullopt;
  return rate(total_tokens_, marks_.back().first - start_);
}

}  // namespace meshrun
