// The Updates stage (updates.hpp).
#include "updates.hpp"

#include "meshrun/data/data.hpp"
#include "roles.hpp"

namespace meshrun::ppo_detail {

Updates::Updates(const Plan& plan, RoleSlots& roles, torch::Device device)
    : plan_(plan), roles_(roles), device_(device) {}

// max_epochs passes; each takes batch.train samples per optimizer step in
// an order shuffled from (seed, step, epoch), the same on every rank.
TrainSums Updates::train(const TrajectoryBatch& trajectories, const Scores& scores, const Experience& experience,
                         int64_t step) {
  TrainSums sums;
  const RlPlan& rl = plan_.rl;
  const SequenceBatch& batch = trajectories.packed;
  const int64_t n = batch.sequences.size(0);
  const int64_t per_step = plan_.step.train_batch;
  const Behaviour behaviour{trajectories.behaviour_log_probs(), trajectories.behaviour_known()};
  for (int epoch = 0; epoch < plan_.step.epochs; ++epoch) {
    // Unsigned, so that a seed near 2^63 wraps instead of overflowing.
    const auto mixed = static_cast<std::uint64_t>(plan_.run.seed) + 7919ULL * static_cast<std::uint64_t>(step);
    torch::manual_seed(static_cast<uint64_t>(data_seed(static_cast<long long>(mixed), epoch)));
    const torch::Tensor order = torch::randperm(n, torch::kInt64).to(device_);
    for (int64_t begin = 0; begin + per_step <= n; begin += per_step) {
      const torch::Tensor chunk = order.narrow(0, begin, per_step);
      const torch::Tensor chunk_mask = experience.response_mask.index_select(0, chunk);
      const double tokens = std::max(1.0, chunk_mask.sum().item<double>());
      // The optimizer step's aggregation weights; micro-batches take their rows.
      const torch::Tensor weights = loss_weights(chunk_mask, rl.loss_agg, rl.policy_tokens());
      for (auto& [role, slot] : roles_.all()) {
        if (!slot.engine) continue;
        const RowRange local = slot.rows(per_step);
        const int64_t micro_size = slot.config->micro_batch;
        // The micro-batch's part of the optimizer step (the load-balancing term's share).
        const double share = 1.0 / static_cast<double>(std::max<int64_t>(1, (local.end - local.begin + micro_size - 1) / micro_size));
        if (role == Role::actor) sums.moe.coefficient = slot.config->router_aux_loss_coef;
        slot.engine->train();
        for (int64_t micro = local.begin; micro < local.end; micro += slot.config->micro_batch) {
          const int64_t end = std::min<int64_t>(local.end, micro + slot.config->micro_batch);
          const torch::Tensor rows = chunk.narrow(0, micro, end - micro);
          const bool last = end == local.end;
          if (role == Role::actor)
            train_actor_micro(slot, batch, scores, experience, behaviour, rows, weights.narrow(0, micro, end - micro),
                              share, last, sums);
          else train_critic_micro(slot, batch, scores, experience, rows, tokens, last, sums);
        }
        // Read at once: a run of non-finite steps stops the update where it
        // happens (RL reads its sums every micro-batch anyway).
        slot.engine->step().read();
        if (role == Role::actor && slot.produces() && slot.dp->rank() == 0) sums.actor_steps += 1;
      }
    }
  }
  return sums;
}

void Updates::train_actor_micro(RoleSlot& slot, const SequenceBatch& batch, const Scores& scores, const Experience& experience,
                               const Behaviour& behaviour, const torch::Tensor& rows, const torch::Tensor& weights,
                               double share, bool last, TrainSums& sums) {
  const RlPlan& rl = plan_.rl;
  const HeadOutputs head =
      response_head(slot, batch, rows, rl.sampling.temperature, /*entropy=*/true, rl.entropy_coef > 0);
  const torch::Tensor& log_probs = head.log_probs;
  const torch::Tensor mask = experience.response_mask.index_select(0, rows);
  PolicyLossOptions options;
  options.kind = rl.policy_loss;
  options.clip_low = rl.clip_low;
  options.clip_high = rl.clip_high;
  options.dual_clip = rl.dual_clip;
  // One optimizer step per rollout: the weights are still the rollout's, so
  // the old log-probs are this forward's own (ratio 1, the policy gradient).
  const bool from_training = rl.old_log_probs_from_training;
  const torch::Tensor old_log_probs =
      from_training ? log_probs.detach() : scores.old_log_probs.index_select(0, rows);
  const PolicyLossTerms policy =
      policy_loss(log_probs, old_log_probs, experience.advantages.index_select(0, rows), mask, options);
  // The rollout correction judges the policy's tokens whose engine
  // log-probs are known; its figures are logged whatever the mode.
  const RolloutCorrectionTerms correction = rollout_correction(
      old_log_probs, behaviour.log_probs.index_select(0, rows),
      mask * behaviour.known.index_select(0, rows).unsqueeze(1),
      RolloutCorrectionOptions{rl.rollout_correction, rl.rollout_is_cap, rl.rollout_is_low, rl.rollout_is_high});
  const torch::Tensor corrected =
      rl.rollout_correction == RolloutCorrection::none ? policy.loss : policy.loss * correction.factors;
  const torch::Tensor policy_part = (corrected * weights).sum();
  torch::Tensor loss = policy_part;
  const torch::Tensor entropy = head.entropy * mask;
  if (rl.entropy_coef > 0) loss = loss - rl.entropy_coef * (entropy * weights).sum();
  torch::Tensor kl_part, kl;
  if (rl.kl_mode == KlMode::loss) {
    // The KL to the reference under the current weights, with its gradient.
    kl = kl_penalty(log_probs, scores.ref_log_probs.index_select(0, rows), rl.kl_estimator) * mask;
    kl_part = (kl * weights).sum();
    loss = loss + rl.init_kl_coef * kl_part;
  }
  if (from_training && slot.produces()) {
    if (!sums.actor_log_probs.defined())
      sums.actor_log_probs = torch::zeros({batch.sequences.size(0), batch.response_len}, torch::kFloat);
    sums.actor_log_probs.index_copy_(0, rows.cpu(), (old_log_probs * mask).to(torch::kCPU, torch::kFloat));
    // The step's KL figure: the loss's own when it has one (the same values:
    // the old log-probs are this forward's), else computed here.
    if (rl.has_ref)
      sums.kl_sum += (kl.defined() ? kl.detach()
                                   : kl_penalty(old_log_probs, scores.ref_log_probs.index_select(0, rows),
                                                rl.kl_estimator) * mask)
                         .sum()
                         .item<double>();
  }
  // The weights aggregate over the whole optimizer step; the engine
  // averages gradients over dp (× sp), so each rank's part counts dp
  // times. With sp every rank of the group computes this whole loss and
  // gather_columns() sums their gradients, which the sp in the average
  // takes back out. The routers' term is a per-rank mean already: the
  // average over the replicas is the one it wants.
  slot.engine->backward(sums.moe.add(loss * static_cast<double>(slot.dp->size()), (*slot.model)->router_stats(), share),
                        last);
  if (slot.produces()) {
    sums.policy_loss += policy_part.item<double>();
    if (kl_part.defined()) sums.kl_loss += kl_part.item<double>();
    sums.clip += policy.clipped.sum().item<double>();
    sums.entropy += entropy.detach().sum().item<double>();
    sums.tokens_policy += mask.sum().item<double>();
    sums.is_tokens += correction.tokens;
    sums.is_ratio_sum += correction.ratio_sum;
    sums.is_ratio_max = std::max(sums.is_ratio_max, correction.ratio_max);
    sums.is_clipped += correction.clipped;
    sums.is_masked += correction.masked;
    // Once per dp rank: its tp and sp ranks share the rows.
    sums.tokens += batch.attention_mask.index_select(0, rows).sum().item<int64_t>();
  }
}

void Updates::train_critic_micro(RoleSlot& slot, const SequenceBatch& batch, const Scores& scores, const Experience& experience,
                                const torch::Tensor& rows, double tokens, bool last, TrainSums& sums) {
  const torch::Tensor values = response_columns(slot.engine->forward(inputs_for(batch, rows)), batch, slot);
  const torch::Tensor mask = experience.response_mask.index_select(0, rows);
  const torch::Tensor loss = clipped_value_loss(values, scores.values.index_select(0, rows),
                                                experience.returns.index_select(0, rows), mask, plan_.rl.value_clip);
  slot.engine->backward(loss.sum() * (slot.dp->size() / tokens), last);
  if (slot.produces()) {
    sums.value_loss += loss.sum().item<double>();
    sums.tokens_value += mask.sum().item<double>();
  }
}

}  // namespace meshrun::ppo_detail
