// PPO scoring phase: actor and ref log-probs, critic values, the reward
// model and the reward hook, shared with every rank.
#include "ppo_run.hpp"

namespace meshrun::ppo_detail {

namespace {

// With sp > 1 the model's outputs are this rank's columns of the whole rows;
// the response is a run of columns spread over the sp ranks, so the
// per-position terms are computed on every local column and then gathered.
bool split(const RoleSlot& slot) { return slot.sp != nullptr; }

}  // namespace

torch::Tensor PpoRun::response_columns(const torch::Tensor& out, const SequenceBatch& batch, const RoleSlot& slot) const {
  return (*slot.model)->whole_rows(out, batch.sequences.size(1)).narrow(1, batch.prompt_len - 1, batch.response_len);
}

torch::Tensor PpoRun::response_log_probs(const torch::Tensor& logits, const SequenceBatch& batch, const torch::Tensor& rows,
                                         const RoleSlot& slot) const {
  const int64_t p = batch.prompt_len, r = batch.response_len;
  const double temperature = recipe_.rollout.temperature;
  const auto tempered = [temperature](const torch::Tensor& x) {
    return temperature > 0 && temperature != 1.0 ? x / temperature : x;
  };
  const torch::Tensor sequences = batch.sequences.index_select(0, rows);
  if (!split(slot))
    return vocab_parallel_log_probs(tempered(logits.narrow(1, p - 1, r)), sequences.narrow(1, p, r), slot.tp);
  // Column c predicts the token at c + 1 (the last column predicts nothing).
  const int64_t length = sequences.size(1);
  const torch::Tensor next = torch::cat({sequences.narrow(1, 1, length - 1), torch::zeros_like(sequences.narrow(1, 0, 1))}, 1);
  const SequenceShard shard = (*slot.model)->sequence_shard(length, logits.device());
  return response_columns(vocab_parallel_log_probs(tempered(logits), shard.take(next, 0), slot.tp), batch, slot);
}

torch::Tensor PpoRun::response_entropy(const torch::Tensor& logits, const SequenceBatch& batch, const RoleSlot& slot) const {
  if (!split(slot)) return vocab_parallel_entropy(logits.narrow(1, batch.prompt_len - 1, batch.response_len), slot.tp);
  return response_columns(vocab_parallel_entropy(logits, slot.tp), batch, slot);
}

ModelInputs PpoRun::inputs_for(const SequenceBatch& batch, const torch::Tensor& rows) const {
  return ModelInputs{batch.sequences.index_select(0, rows), {}, {}, batch.attention_mask.index_select(0, rows)};
}

// Each role `wanted` picks scores its dp slice in micro_rollout chunks into
// [3, n, r] per-token scores (actor, ref, critic log-probs / values) and [n]
// per-sample ones (the reward model's, at each sequence's last real token);
// one all-reduce gives everyone every row.
torch::Tensor PpoRun::run_roles(const Rollout& rollout, const std::function<bool(const std::string&)>& wanted) {
  const SequenceBatch& batch = rollout.batch;
  const int64_t n = batch.sequences.size(0), r = batch.response_len;
  torch::Tensor per_token = torch::zeros({3, n, r}, torch::kFloat);
  torch::Tensor per_sample = torch::zeros({n}, torch::kFloat);
  torch::NoGradGuard no_grad;
  for (auto& [name, slot] : roles_) {
    if (!wanted(name)) continue;
    const RowRange range = slot.rows(n);
    for (int64_t begin = range.begin; begin < range.end; begin += plan_.step.micro_scoring) {
      const int64_t end = std::min<int64_t>(range.end, begin + plan_.step.micro_scoring);
      const torch::Tensor rows = torch::arange(begin, end, torch::TensorOptions().dtype(torch::kInt64).device(device_));
      const ModelInputs inputs = inputs_for(batch, rows);
      torch::Tensor out;
      if (name == "actor") {
        slot.engine->eval();
        out = response_log_probs(slot.engine->forward(inputs), batch, rows, slot);
      } else if (name == "ref") {
        out = response_log_probs((*slot.model)->forward(inputs), batch, rows, slot);
      } else if (name == "critic") {
        slot.engine->eval();
        out = response_columns(slot.engine->forward(inputs), batch, slot);
      } else {  // reward model: its score at each sequence's last real token
        const torch::Tensor last = (batch.prompt_len + batch.response_mask.index_select(0, rows).sum(1) - 1).unsqueeze(1);
        out = (*slot.model)->whole_rows((*slot.model)->forward(inputs), batch.sequences.size(1)).gather(1, last).squeeze(1);
      }
      if (!slot.produces()) continue;
      out = out.to(torch::kCPU, torch::kFloat);
      if (name == "reward") per_sample.narrow(0, begin, end - begin).copy_(out);
      else per_token[name == "actor" ? 0 : name == "ref" ? 1 : 2].narrow(0, begin, end - begin).copy_(out);
    }
  }
  torch::Tensor flat = torch::cat({per_token.view(-1), per_sample});
  share_sum(flat, world_);
  return flat;
}

SampleRewards PpoRun::score_rewards(const Rollout& rollout, int64_t step) {
  const int64_t n = static_cast<int64_t>(rollout.samples.size());
  SampleRewards rewards;
  rewards.model = torch::zeros({n}, torch::kFloat);
  if (plan_.role("reward")) {  // every rank takes part in the exchange
    const torch::Tensor flat = run_roles(rollout, [](const std::string& name) { return name == "reward"; });
    rewards.model = flat.narrow(0, flat.numel() - n, n).clone();
  }
  rewards.hook = torch::zeros({n}, torch::kFloat);
  if (!reward_function_.empty()) {
    torch::Tensor hook_rewards = torch::zeros({n}, torch::kFloat64);
    if (recipe_.hooks.parallel) {
      // Every rank scores its own share of the samples, whole prompt groups
      // (a hook may compare a prompt's samples); the sum gives all.
      const int64_t group = plan_.step.group_size;
      const RowRange groups = slice_of(n / group, world_.size(), world_.rank());
      const RowRange share{groups.begin * group, groups.end * group};
      on_every_rank_or_fail_everywhere(world_, reward_function_, [&] {
        if (share.size() == 0) return;
        const std::vector<double> values = call_reward(hook_context(step, rollout, share), reward_function_,
                                                       rollout.samples, rewards.model);
        std::copy(values.begin(), values.end(), hook_rewards.data_ptr<double>() + share.begin);
      });
      share_sum(hook_rewards, world_);
      rewards.hook = hook_rewards.to(torch::kFloat);
    } else {
      on_rank0_or_fail_everywhere(world_, reward_function_, [&] {
        const std::vector<double> values = call_reward(hook_context(step, rollout, RowRange{0, n}), reward_function_,
                                                       rollout.samples, rewards.model);
        std::copy(values.begin(), values.end(), hook_rewards.data_ptr<double>());
      });
      torch::Tensor shared = hook_rewards.to(world_.device());
      world_.broadcast(shared, 0);
      rewards.hook = shared.to(torch::kCPU, torch::kFloat);
    }
  }
  return rewards;
}

Scores PpoRun::score(const Rollout& rollout, const SampleRewards& rewards) {
  const int64_t n = rollout.batch.sequences.size(0), r = rollout.batch.response_len;
  const torch::Tensor flat = run_roles(rollout, [](const std::string& name) { return name != "reward"; });
  Scores scores;
  scores.old_log_probs = flat.narrow(0, 0, n * r).view({n, r}).to(device_);
  scores.ref_log_probs = flat.narrow(0, n * r, n * r).view({n, r}).to(device_);
  scores.values = flat.narrow(0, 2 * n * r, n * r).view({n, r}).to(device_);
  scores.model_rewards = rewards.model.to(device_);
  scores.hook_rewards = rewards.hook.to(device_);
  return scores;
}

ExperienceOptions PpoRun::experience_options() const {
  ExperienceOptions options;
  options.advantage = recipe_.ppo.advantage;
  options.group_size = plan_.step.group_size;
  options.kl_coef_in_reward = recipe_.ppo.kl_mode == KlMode::reward ? kl_controller_.coef() : 0.0;
  options.kl_estimator = recipe_.ppo.kl_estimator;
  options.max_new_tokens = recipe_.rollout.max_new_tokens;
  options.overlong_buffer = recipe_.ppo.overlong_buffer;
  options.overlong_penalty = recipe_.ppo.overlong_penalty;
  options.gamma = recipe_.ppo.gamma;
  options.lambd = recipe_.ppo.lambd;
  options.reward_clip = recipe_.ppo.reward_clip;
  options.has_ref = plan_.role("ref") && !plan_.role("ref")->model.empty();
  return options;
}

}  // namespace meshrun::ppo_detail
