// RouterBalance: the routers' load-balancing loss of a mixture of experts in
// one training step, for every algorithm that trains one (SFT, the PPO
// family's actor).
//
// After each micro-batch's forward, add() puts coefficient × aux_loss ×
// share on the loss that micro-batch back-propagates, where share is its
// part of the step (1 / the rank's micro-batches in the step): the step's
// gradient is then the coefficient times the mean aux loss's, averaged over
// the replicas like every other gradient, which is what transformers adds
// (router_aux_loss_coef × aux_loss) per forward. It keeps this rank's sums
// behind moe/aux_loss (the mean aux loss over micro-batches, reported
// unweighted) and moe/expert_load_max (the largest); for a dense model add()
// returns the loss as it was and nothing is reported.
#pragma once

#include <algorithm>

#include <torch/torch.h>

#include "meshrun/metrics/metrics.hpp"
#include "meshrun/model/model.hpp"

namespace meshrun {

struct RouterBalance {
  double coefficient = 0;  // RolePlan::router_aux_loss_coef
  double aux_sum = 0;       // Σ of the micro-batches' aux losses
  double micro_batches = 0;
  double load_max = 0;

  // `loss` plus the term of the forward `stats` describe (one host read of
  // the two figures per micro-batch).
  torch::Tensor add(torch::Tensor loss, const RouterStats& stats, double share) {
    if (!stats.aux_loss.defined()) return loss;
    aux_sum += stats.aux_loss.detach().item<double>();
    load_max = std::max(load_max, stats.expert_load_max.item<double>());
    micro_batches += 1;
    if (coefficient == 0) return loss;
    return loss + stats.aux_loss.to(loss.scalar_type()) * (coefficient * share);
  }
  bool any() const { return micro_batches > 0; }
  // moe/aux_loss and moe/expert_load_max from sums over the ranks (the
  // caller's reductions: aux_sum and micro_batches summed, load_max the max).
  static void set_metrics(MetricsRecord& record, double aux_sum, double micro_batches, double load_max) {
    record.set("moe/aux_loss", aux_sum / std::max(1.0, micro_batches)).set("moe/expert_load_max", load_max);
  }
};

}  // namespace meshrun
