// The DPO losses (include/meshrun/preference/dpo_loss.hpp).
#include "meshrun/preference/dpo_loss.hpp"

namespace meshrun {

DpoLossTerms dpo_loss(const torch::Tensor& policy_chosen, const torch::Tensor& policy_rejected,
                      const torch::Tensor& reference_chosen, const torch::Tensor& reference_rejected,
                      const torch::Tensor& chosen_tokens, const torch::Tensor& rejected_tokens, const DpoConfig& config) {
  torch::Tensor pc = policy_chosen, pr = policy_rejected, rc = reference_chosen, rr = reference_rejected;
  if (config.loss == DpoLoss::ipo) {
    const torch::Tensor nc = chosen_tokens.to(pc.dtype()).clamp_min(1), nr = rejected_tokens.to(pc.dtype()).clamp_min(1);
    pc = pc / nc;
    pr = pr / nr;
    rc = rc / nc;
    rr = rr / nr;
  }
  const torch::Tensor margin = (pc - pr) - (rc - rr);
  DpoLossTerms out;
  switch (config.loss) {
    case DpoLoss::sigmoid: {
      const double beta = config.beta, smoothing = config.label_smoothing;
      out.loss = -(1.0 - smoothing) * torch::log_sigmoid(beta * margin) - smoothing * torch::log_sigmoid(-beta * margin);
      break;
    }
    case DpoLoss::ipo:
      out.loss = (margin - 1.0 / (2.0 * config.beta)).square();
      break;
  }
  out.chosen_rewards = (config.beta * (pc - rc)).detach();
  out.rejected_rewards = (config.beta * (pr - rr)).detach();
  return out;
}

torch::Tensor bradley_terry_loss(const torch::Tensor& chosen_scores, const torch::Tensor& rejected_scores) {
  return -torch::log_sigmoid(chosen_scores - rejected_scores);
}

}  // namespace meshrun
