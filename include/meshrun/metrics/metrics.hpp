// Training metrics: one JSON object per line in <logging.dir>/metrics.jsonl,
// tokens/s over a window of steps, and named phase timers.
//
// MetricsRecord keeps its keys in insertion order with "step" always first,
// so lines are easy to read and diff; setting a key again replaces its value
// in place. Numbers are written with full precision (the shortest text that
// reads back to the same double); NaN and ±inf, which JSON cannot express,
// are written as null.
//
// MetricsWriter appends (so a resumed run continues the same file), creates
// the folder, and flushes every line, so a crash loses at most the line
// being written. Only the writing rank (rank 0) touches the file; a writer
// constructed with enabled = false does nothing, so every rank can call it
// unconditionally.
//
// Time comes from a Clock, so tests drive a manual clock instead of
// sleeping.
#pragma once

#include <concepts>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "meshrun/error.hpp"

namespace meshrun {

// A metrics file (metrics.jsonl, TensorBoard events) that cannot be created
// or written; the message names the path.
class MetricsError : public KindError<ErrorKind::io> {
 public:
  using KindError::KindError;
};

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic seconds from an arbitrary origin.
  virtual double now_seconds() const = 0;
};

// std::chrono::steady_clock.
const Clock& steady_clock();

class MetricsRecord {
 public:
  using Value = std::variant<double, int64_t, bool, std::string>;

  explicit MetricsRecord(int64_t step) : step_(step) {}

  // Throws std::logic_error for an empty key or "step" (keys come from code).
  template <typename T>
    requires std::is_arithmetic_v<T>
  MetricsRecord& set(std::string_view key, T value) {
    if constexpr (std::is_same_v<T, bool>) {
      return set_value(key, Value(value));
    } else if constexpr (std::is_integral_v<T>) {
      return set_value(key, Value(static_cast<int64_t>(value)));
    } else {
      return set_value(key, Value(static_cast<double>(value)));
    }
  }
  MetricsRecord& set(std::string_view key, std::string_view value) { return set_value(key, Value(std::string(value))); }
  MetricsRecord& set(std::string_view key, const char* value) { return set(key, std::string_view(value)); }

  int64_t step() const { return step_; }
  const std::vector<std::pair<std::string, Value>>& values() const { return values_; }
  const Value* find(std::string_view key) const;
  // One JSON object, no newline: {"step":3,"loss":0.25,...}
  std::string to_json() const;

 private:
  MetricsRecord& set_value(std::string_view key, Value value);

  int64_t step_;
  std::vector<std::pair<std::string, Value>> values_;
};

// A double as JSON: shortest round-trip text, or null when not finite.
std::string json_number(double value);

class MetricsWriter {
 public:
  // For a resumed run, before the writer opens the file: drops the lines of
  // `path` whose step is above `last_step` (a crashed run may have logged
  // steps its last checkpoint does not cover), by temporary file and
  // rename. A missing file is fine.
  static void keep_steps_up_to(const std::string& path, int64_t last_step);

  // enabled: whether this process writes (rank 0). When enabled, creates
  // `dir` and opens dir/file_name for appending; throws MetricsError naming
  // the path when it cannot.
  MetricsWriter(const std::string& dir, bool enabled, const std::string& file_name = "metrics.jsonl");
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  // Appends record.to_json() and a newline, flushed. Throws MetricsError
  // naming the path on a write error.
  void write(const MetricsRecord& record);
  bool enabled() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Tokens per second over the last `window` recorded steps, and overall.
class ThroughputMeter {
 public:
  // Starts timing now. window >= 1 (std::logic_error otherwise).
  explicit ThroughputMeter(const Clock& clock, int window = 10);

  // Restarts timing now, forgetting what was recorded (e.g. after a
  // checkpoint save or an evaluation that should not count).
  void restart();
  // At the end of a step: the tokens it processed.
  void record(int64_t tokens);

  // Over the last `window` steps (fewer at the start); nullopt before the
  // first step or when no time has passed.
  std::optional<double> tokens_per_second() const;
  std::optional<double> overall_tokens_per_second() const;
  int64_t total_tokens() const { return total_tokens_; }
  int64_t steps() const { return steps_; }

 private:
  const Clock* clock_;
  int window_;
  double start_ = 0;
  int64_t total_tokens_ = 0;
  int64_t steps_ = 0;
  std::deque<std::pair<double, int64_t>> marks_;  // (time, tokens so far), at most window + 1
};

// Named durations of one step (forward, backward, optimizer, data, ...),
// accumulated by scoped timers, listed in the order each phase first
// started (an outer phase before the ones nested in it); reset() per step.
class PhaseTimers {
 public:
  explicit PhaseTimers(const Clock& clock) : clock_(&clock) {}

  class Scope {
   public:
    Scope(PhaseTimers& timers, std::string name);
    ~Scope() { stop(); }
    Scope(Scope&& other) noexcept;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    Scope& operator=(Scope&&) = delete;
    // Adds the time since construction; later calls and the destructor
    // add nothing more.
    void stop();

   private:
    PhaseTimers* timers_;
    std::string name_;
    double start_;
  };

  [[nodiscard]] Scope scope(std::string name) { return Scope(*this, std::move(name)); }
  void add(std::string_view name, double seconds);
  double seconds(std::string_view name) const;  // 0 for a phase never timed
  const std::vector<std::pair<std::string, double>>& totals() const { return totals_; }
  void reset() { totals_.clear(); }
  // prefix + name → seconds, e.g. "time/forward".
  void add_to(MetricsRecord& record, std::string_view prefix = "time/") const;

 private:
  const Clock* clock_;
  std::vector<std::pair<std::string, double>> totals_;
};

}  // namespace meshrun
