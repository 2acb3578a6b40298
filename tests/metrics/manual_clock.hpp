// A Clock the metrics tests move by hand, so no test sleeps.
#pragma once

#include "meshrun/metrics/metrics.hpp"

namespace meshrun::metrics_test {

class ManualClock : public Clock {
 public:
  double now_seconds() const override { return now_; }
  void advance(double seconds) { now_ += seconds; }

 private:
  double now_ = 1000.0;
};

}  // namespace meshrun::metrics_test
