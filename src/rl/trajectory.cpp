// TrajectoryBatch's tensors (include/meshrun/rl/trajectory.hpp).
#include "meshrun/rl/trajectory.hpp"

#include <stdexcept>

namespace meshrun {

namespace {

// One float per trajectory, as a [N] CPU tensor.
template <class Value>
torch::Tensor per_trajectory(const std::vector<Trajectory>& trajectories, Value value) {
  torch::Tensor out = torch::empty({static_cast<int64_t>(trajectories.size())}, torch::kFloat);
  float* data = out.data_ptr<float>();
  for (size_t i = 0; i < trajectories.size(); ++i) data[i] = static_cast<float>(value(trajectories[i]));
  return out;
}

// [N, R] from each trajectory's per-token vector (empty: `fill` on its
// response tokens), zeros past each response.
template <class Vector>
torch::Tensor per_token(const std::vector<Trajectory>& trajectories, int64_t width, const Vector Trajectory::*member,
                        float fill) {
  torch::Tensor out = torch::zeros({static_cast<int64_t>(trajectories.size()), width}, torch::kFloat);
  auto view = out.accessor<float, 2>();
  for (size_t i = 0; i < trajectories.size(); ++i) {
    const Trajectory& trajectory = trajectories[i];
    const Vector& values = trajectory.*member;
    const int64_t length = std::min(trajectory.response_length(), width);
    if (!values.empty() && static_cast<int64_t>(values.size()) != trajectory.response_length())
      throw std::logic_error("a trajectory's per-token vector does not match its response length");
    for (int64_t t = 0; t < length; ++t)
      view[static_cast<int64_t>(i)][t] = values.empty() ? fill : static_cast<float>(values[static_cast<size_t>(t)]);
  }
  return out;
}

}  // namespace

void TrajectoryBatch::pack(int64_t pad_id, const torch::Device& device) {
  std::vector<const GeneratedSample*> samples;
  samples.reserve(trajectories.size());
  for (const Trajectory& trajectory : trajectories) samples.push_back(&trajectory.sample);
  packed = pack_samples(std::span<const GeneratedSample* const>(samples), pad_id, device);
}

torch::Tensor TrajectoryBatch::kept() const {
  return per_trajectory(trajectories, [](const Trajectory& t) { return t.kept ? 1.0f : 0.0f; });
}

torch::Tensor TrajectoryBatch::model_rewards() const {
  return per_trajectory(trajectories, [](const Trajectory& t) { return t.model_reward; });
}

torch::Tensor TrajectoryBatch::hook_rewards() const {
  return per_trajectory(trajectories, [](const Trajectory& t) { return t.hook_reward; });
}

torch::Tensor TrajectoryBatch::env_rewards() const {
  return per_trajectory(trajectories, [](const Trajectory& t) { return t.episode.env_reward; });
}

torch::Tensor TrajectoryBatch::total_rewards() const { return model_rewards() + hook_rewards() + env_rewards(); }

torch::Tensor TrajectoryBatch::loss_mask() const {
  const torch::Device device = packed.response_mask.device();
  const torch::Tensor policy_tokens = per_token(trajectories, packed.response_len, &Trajectory::loss_mask, 1.0f);
  return packed.response_mask.to(torch::kFloat) * policy_tokens.to(device) * kept().unsqueeze(1).to(device);
}

bool TrajectoryBatch::has_token_rewards() const {
  for (const Trajectory& trajectory : trajectories)
    if (!trajectory.token_rewards.empty()) return true;
  return false;
}

torch::Tensor TrajectoryBatch::behaviour_log_probs() const {
  torch::Tensor out = torch::zeros({size(), packed.response_len}, torch::kFloat);
  auto view = out.accessor<float, 2>();
  for (size_t i = 0; i < trajectories.size(); ++i) {
    const std::vector<float>& values = trajectories[i].behaviour_log_probs();
    const int64_t length = std::min<int64_t>(static_cast<int64_t>(values.size()), packed.response_len);
    for (int64_t t = 0; t < length; ++t) view[static_cast<int64_t>(i)][t] = values[static_cast<size_t>(t)];
  }
  return out.to(packed.response_mask.device());
}

torch::Tensor TrajectoryBatch::behaviour_known() const {
  return per_trajectory(trajectories, [](const Trajectory& t) {
           return !t.behaviour_log_probs().empty() || t.response_length() == 0 ? 1.0f : 0.0f;
         })
      .to(packed.response_mask.device());
}

torch::Tensor TrajectoryBatch::token_rewards() const {
  return per_token(trajectories, packed.response_len, &Trajectory::token_rewards, 0.0f)
      .to(packed.response_mask.device());
}

}  // namespace meshrun
