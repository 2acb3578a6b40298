// The Updates stage: max_epochs passes of policy and value optimisation
// over a step's experience through the trained roles' engines, the policy
// terms aggregated by [ppo] loss_agg. Internal to src/rl.
#pragma once

#include "meshrun/train/router_balance.hpp"

#include "experience.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/rl/trajectory.hpp"

namespace meshrun::ppo_detail {

class RoleSlots;
struct RoleSlot;

// What the updates of one step add up to, on this rank (an all-reduce
// brings them together for the metrics).
struct TrainSums {
  double policy_loss = 0;  // Σ of each actor optimizer step's aggregated policy loss
  double kl_loss = 0;      // the same for the KL term (kl_mode "loss")
  double actor_steps = 0;  // actor optimizer steps (counted on one rank)
  double clip = 0, entropy = 0, tokens_policy = 0, value_loss = 0, tokens_value = 0;
  long long tokens = 0;  // processed in training, this rank's actor share (for throughput)
  // With old_log_probs_from_training: the training forward's log-probs of
  // this rank's rows ([N, R], zeros elsewhere; summed over ranks they are
  // the actor's log-probs before the update) and Σ of the KL to the
  // reference over the policy's tokens (what Experience computes otherwise).
  torch::Tensor actor_log_probs;
  double kl_sum = 0;
  // Rollout correction over the judged tokens (rl/math.hpp's terms, summed
  // over the micro-batches; the max is this rank's).
  double is_tokens = 0, is_ratio_sum = 0, is_ratio_max = 0, is_clipped = 0, is_masked = 0;
  // A mixture-of-experts actor: its routers' load-balancing term and figures
  // (every actor rank's micro-batches; the critic's routers train without it).
  RouterBalance moe;
};

class Updates {
 public:
  Updates(const Plan& plan, RoleSlots& roles, torch::Device device);
  // max_epochs passes; each takes batch.train samples per optimizer step in
  // an order shuffled from (seed, step, epoch), the same on every rank.
  TrainSums train(const TrajectoryBatch& batch, const Scores& scores, const Experience& experience, int64_t step);

 private:
  // `weights`: the rows' aggregation weights (loss_weights() of the
  // optimizer step's batch).
  // The engines' log-probs [N, R] and which rows have them [N]: what the
  // rollout correction compares the old log-probs with.
  struct Behaviour {
    torch::Tensor log_probs, known;
  };
  void train_actor_micro(RoleSlot& slot, const SequenceBatch& batch, const Scores& scores,
                         const Experience& experience, const Behaviour& behaviour, const torch::Tensor& rows,
                         const torch::Tensor& weights, double share, bool last, TrainSums& sums);
  void train_critic_micro(RoleSlot& slot, const SequenceBatch& batch, const Scores& scores,
                          const Experience& experience, const torch::Tensor& rows, double tokens, bool last,
                          TrainSums& sums);

  const Plan& plan_;
  RoleSlots& roles_;
  torch::Device device_;
};

}  // namespace meshrun::ppo_detail
