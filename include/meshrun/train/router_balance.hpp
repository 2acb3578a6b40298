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
// returns the loss as it was and nothing is reported. Under routing replay
// it also counts the replayed routes and the flips the routers would have
// made (moe/routing_flips).
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
  // Routing replay: (token, sparse layer) pairs replayed, and flipped
  // (their router would have chosen otherwise).
  double replayed = 0, flipped = 0, routed = 0;

  // `loss` plus the term of the forward `stats` describe (one host read of
  // the two figures per micro-batch).
  torch::Tensor add(torch::Tensor loss, const RouterStats& stats, double share) {
    if (!stats.aux_loss.defined()) return loss;
    aux_sum += stats.aux_loss.detach().item<double>();
    load_max = std::max(load_max, stats.expert_load_max.item<double>());
    if (stats.replayed_routes.defined()) {
      const torch::Tensor replays = stats.replayed_routes.cpu();
      replayed += replays[0].item<double>();
      flipped += replays[1].item<double>();
      routed += replays[2].item<double>();
    }
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
  // moe/routing_flips: of the replayed (token, sparse layer) pairs of the
  // update's forwards, the fraction whose router would have chosen other
  // experts: what routing replay spared; moe/replayed_routes: the fraction
  // of the real tokens' pairs that had a route to replay (all but each
  // sequence's last token, which the engine never fed). Sums over the ranks.
  static void set_replay_metrics(MetricsRecord& record, double replayed, double flipped, double routed) {
    record.set("moe/routing_flips", replayed > 0 ? flipped / replayed : 0.0)
        .set("moe/replayed_routes", routed > 0 ? replayed / routed : 0.0);
  }
};

}  // namespace meshrun
