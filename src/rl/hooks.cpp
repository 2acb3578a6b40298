// The step's trajectories as HookBatch views for on_rollout and reward
// (src/rl/rl_internal.hpp). The arrays live in this frame for the call;
// Lua reads and (on_rollout) writes them in place.
#include <algorithm>
#include <span>
#include <stdexcept>

#include "meshrun/hooks/hook_batch.hpp"
#include "rl_internal.hpp"

namespace meshrun::ppo_detail {
namespace {

// Row-major buffers for the batch: ids right-padded with 0, lengths, masks.
struct SampleArrays {
  int64_t rows = 0, prompt_width = 1, response_width = 1;
  std::vector<int64_t> prompt_ids, response_ids, prompt_len, response_len, turns;
  std::vector<uint8_t> response_mask, policy_mask;
  std::vector<double> env_reward;

  explicit SampleArrays(std::span<const Trajectory> trajectories) : rows(static_cast<int64_t>(trajectories.size())) {
    for (const auto& trajectory : trajectories) {
      const GeneratedSample& s = trajectory.sample;
      prompt_width = std::max<int64_t>(prompt_width, static_cast<int64_t>(s.prompt.size()));
      response_width = std::max<int64_t>(response_width, static_cast<int64_t>(s.response.size()));
    }
    prompt_ids.assign(static_cast<size_t>(rows * prompt_width), 0);
    response_ids.assign(static_cast<size_t>(rows * response_width), 0);
    response_mask.assign(static_cast<size_t>(rows * response_width), 0);
    policy_mask.assign(static_cast<size_t>(rows * response_width), 0);
    for (int64_t row = 0; row < rows; ++row) {
      const auto& s = trajectories[static_cast<size_t>(row)].sample;
      std::copy(s.prompt.begin(), s.prompt.end(), prompt_ids.begin() + row * prompt_width);
      std::copy(s.response.begin(), s.response.end(), response_ids.begin() + row * response_width);
      std::fill_n(response_mask.begin() + row * response_width, s.response.size(), uint8_t{1});
      const auto& policy = trajectories[static_cast<size_t>(row)].loss_mask;
      if (policy.empty()) std::fill_n(policy_mask.begin() + row * response_width, s.response.size(), uint8_t{1});
      else std::copy(policy.begin(), policy.end(), policy_mask.begin() + row * response_width);
      turns.push_back(s.turns);
      env_reward.push_back(trajectories[static_cast<size_t>(row)].episode.env_reward);
      prompt_len.push_back(static_cast<int64_t>(s.prompt.size()));
      response_len.push_back(static_cast<int64_t>(s.response.size()));
    }
  }

  HookBatch batch(const HookContext& context, std::span<const Trajectory> trajectories, bool writable) {
    HookBatch out;
    out.size = rows;
    out.arrays.push_back({"prompt_ids", HookArrayType::int64, prompt_ids.data(), {rows, prompt_width}, false});
    out.arrays.push_back({"response_ids", HookArrayType::int64, response_ids.data(), {rows, response_width}, writable});
    out.arrays.push_back({"prompt_len", HookArrayType::int64, prompt_len.data(), {rows}, false});
    out.arrays.push_back({"response_len", HookArrayType::int64, response_len.data(), {rows}, false});
    out.arrays.push_back({"response_mask", HookArrayType::uint8, response_mask.data(), {rows, response_width}, false});
    // Multi-turn episodes: which response tokens the policy sampled (not an
    // observation's), the model turns, the environment's reward.
    out.arrays.push_back({"policy_mask", HookArrayType::uint8, policy_mask.data(), {rows, response_width}, false});
    out.arrays.push_back({"turns", HookArrayType::int64, turns.data(), {rows}, false});
    out.arrays.push_back({"env_reward", HookArrayType::float64, env_reward.data(), {rows}, false});
    const Tokenizer* tokenizer = context.resources.tokenizer;
    // Texts come from the arrays, so an on_rollout rewrite shows in them.
    out.prompt_text = [trajectories, tokenizer](int64_t i) {
      return tokenizer->decode(trajectories[static_cast<size_t>(i)].sample.prompt, true);
    };
    out.response_text = [this, tokenizer](int64_t i) {
      const auto begin = response_ids.begin() + i * response_width;
      const std::vector<int32_t> ids(begin, begin + response_len[static_cast<size_t>(i)]);
      return tokenizer->decode(ids, true);
    };
    if (context.resources.prompts) {
      const PromptDataset* prompts = context.resources.prompts;
      out.label = [prompts, trajectories](int64_t i) -> const nlohmann::json* {
        const auto& label =
            prompts->prompts.at(static_cast<size_t>(trajectories[static_cast<size_t>(i)].prompt_row)).label;
        return label ? &*label : nullptr;
      };
    }
    out.fields = {{"step", static_cast<double>(context.step)},
                  {"n_samples_per_prompt", static_cast<double>(context.resources.group_size)}};
    return out;
  }
};

}  // namespace

void call_on_rollout(const HookContext& context, const std::string& function, std::vector<Trajectory>& trajectories,
                     std::vector<uint8_t>& keep) {
  SampleArrays arrays(trajectories);
  HookBatch batch = arrays.batch(context, trajectories, true);
  const std::vector<bool> kept = call_on_rollout_hook(*context.resources.script, function, batch);
  const int64_t vocab = context.resources.tokenizer->vocab_size();
  for (size_t row = 0; row < trajectories.size(); ++row) {
    keep[row] = kept[row] ? 1 : 0;
    auto& response = trajectories[row].sample.response;
    for (size_t t = 0; t < response.size(); ++t) {
      const int64_t id = arrays.response_ids[row * static_cast<size_t>(arrays.response_width) + t];
      if (id < 0 || id >= vocab)
        throw KindError<ErrorKind::hook>(function + " wrote token id " + std::to_string(id) + " into sample " +
                                 std::to_string(row + 1) + ", outside the vocabulary [0, " + std::to_string(vocab) +
                                 ")");
      response[t] = static_cast<int32_t>(id);
    }
  }
}

std::vector<double> call_reward(const HookContext& context, const std::string& function,
                                const std::vector<Trajectory>& all) {
  const std::span<const Trajectory> trajectories =
      std::span<const Trajectory>(all).subspan(static_cast<size_t>(context.rows.begin),
                                              static_cast<size_t>(context.rows.size()));
  SampleArrays arrays(trajectories);
  HookBatch batch = arrays.batch(context, trajectories, false);
  // The reward model's scores as they were shared: float, widened.
  std::vector<double> scores;
  for (const Trajectory& trajectory : trajectories)
    scores.push_back(static_cast<double>(static_cast<float>(trajectory.model_reward)));
  batch.arrays.push_back({"model_reward", HookArrayType::float64, scores.data(), {arrays.rows}, false});
  return call_reward_hook(*context.resources.script, function, batch);
}

}  // namespace meshrun::ppo_detail
