// The pair losses: DPO's and its implicit rewards as TRL's DPOTrainer
// defines them, and a reward model's Bradley-Terry loss as its
// RewardTrainer does (src/preference/preference_trainer.cpp computes the
// log-probabilities and scores).
#pragma once

#include <torch/torch.h>

#include "meshrun/plan/plan.hpp"  // Plan::dpo: the resolved [dpo] section

namespace meshrun {

// Per pair [pairs]: the loss and the implicit rewards β·(policy − reference)
// log-probabilities of the chosen and rejected responses (detached).
struct DpoLossTerms {
  torch::Tensor loss;
  torch::Tensor chosen_rewards;
  torch::Tensor rejected_rewards;
};

// From the summed response log-probabilities [pairs] of policy and
// reference and the response token counts [pairs] (the ipo loss averages
// per token, as TRL does): sigmoid  -(1-ε)·log σ(β·h) - ε·log σ(-β·h);
// ipo  (h - 1/(2β))²; h = (π_c − π_r) − (ref_c − ref_r).
DpoLossTerms dpo_loss(const torch::Tensor& policy_chosen, const torch::Tensor& policy_rejected,
                      const torch::Tensor& reference_chosen, const torch::Tensor& reference_rejected,
                      const torch::Tensor& chosen_tokens, const torch::Tensor& rejected_tokens, const DpoConfig& config);

// -log σ(s_chosen − s_rejected) per pair [pairs].
torch::Tensor bradley_terry_loss(const torch::Tensor& chosen_scores, const torch::Tensor& rejected_scores);

}  // namespace meshrun
