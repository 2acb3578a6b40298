// KL estimators and the KL controller (include/meshrun/rl/math.hpp).
#include <algorithm>
#include <stdexcept>

#include "meshrun/rl/math.hpp"

namespace meshrun {

torch::Tensor kl_penalty(const torch::Tensor& log_probs, const torch::Tensor& ref_log_probs, KlEstimator estimator) {
  const torch::Tensor log_ratio = log_probs.to(torch::kFloat) - ref_log_probs.to(torch::kFloat);
  switch (estimator) {
    case KlEstimator::k1:
      return log_ratio;
    case KlEstimator::k2:
      return 0.5 * log_ratio.square();
    case KlEstimator::k3:
      return torch::exp(-log_ratio) - 1 + log_ratio;
  }
  throw std::logic_error("unreachable KL estimator");
}

KlController::KlController(double init_coef, double target, double horizon)
    : coef_(init_coef), target_(target), horizon_(horizon) {
  // The schema refuses kl_horizon <= 0 ([ppo] kl_horizon).
  if (target > 0 && horizon <= 0) throw std::logic_error("an adaptive KL controller needs kl_horizon > 0");
}

void KlController::update(double kl, int64_t samples) {
  if (target_ <= 0) return;
  const double error = std::clamp(kl / target_ - 1.0, -0.2, 0.2);
  coef_ *= 1.0 + error * static_cast<double>(samples) / horizon_;
}

}  // namespace meshrun
