// World exchanges of the PPO step (src/rl/rl_internal.hpp).
#include <spdlog/spdlog.h>

#include "meshrun/model/hf_model.hpp"
#include "rl_internal.hpp"

namespace meshrun::ppo_detail {

RowRange slice_of(int64_t count, int parts, int part) {
  return RowRange{count * part / parts, count * (part + 1) / parts};
}

std::vector<Trajectory> share_trajectories(const std::vector<ProducedSlice>& local, int64_t total, int64_t max_prompt,
                                           int64_t max_response, bool episodes, bool versions, Group& world,
                                           RouteShape route_shape) {
  // Row layout: prompt ids, response ids, with episodes the policy mask,
  // with versions the tokens' policy versions, then prompt length, response length, stopped-at-eos, turns, whether
  // the mask is set, how the episode ended, its observations and those
  // cut; zeros from non-producers add nothing. The float rows: log-probs,
  // then the environment's reward (a float, as TrajectoryBatch's rewards).
  constexpr int64_t kTail = 8;
  const int64_t mask_width = episodes ? max_response : 0;
  const int64_t versions_at = max_prompt + max_response + mask_width;
  const int64_t width = versions_at + (versions ? max_response : 0) + kTail;
  torch::Tensor rows = torch::zeros({total, width}, torch::kInt64);
  torch::Tensor floats = torch::zeros({total, max_response + 1}, torch::kFloat);
  auto view = rows.accessor<int64_t, 2>();
  auto float_view = floats.accessor<float, 2>();
  // Routing replay: expert + 1 (0 where nothing was recorded) for each
  // position's layers and picks, int32 (the rows' int64 would double it).
  const int64_t per_position = int64_t{route_shape.layers} * route_shape.picks;
  const int64_t route_width = per_position * (max_prompt + max_response);
  torch::Tensor routes = torch::zeros({per_position > 0 ? total : 0, route_width}, torch::kInt32);
  for (const ProducedSlice& slice : local) {
    for (size_t i = 0; i < slice.samples.size(); ++i) {
      const GeneratedSample& sample = slice.samples[i];
      const int64_t row = slice.begin + static_cast<int64_t>(i);
      if (static_cast<int64_t>(sample.prompt.size()) > max_prompt ||
          static_cast<int64_t>(sample.response.size()) > max_response ||
          sample.policy_mask.size() > (episodes ? sample.response.size() : 0) ||
          sample.versions.size() > (versions ? sample.response.size() : 0) || row < 0 || row >= total)
        throw std::logic_error("a generated sample exceeds the rollout's maximum lengths");
      for (size_t t = 0; t < sample.prompt.size(); ++t) view[row][static_cast<int64_t>(t)] = sample.prompt[t];
      for (size_t t = 0; t < sample.response.size(); ++t)
        view[row][max_prompt + static_cast<int64_t>(t)] = sample.response[t];
      for (size_t t = 0; t < sample.policy_mask.size(); ++t)
        view[row][max_prompt + max_response + static_cast<int64_t>(t)] = sample.policy_mask[t];
      for (size_t t = 0; t < sample.versions.size(); ++t) view[row][versions_at + static_cast<int64_t>(t)] = sample.versions[t];
      for (size_t t = 0; t < sample.log_probs.size() && t < sample.response.size(); ++t)
        float_view[row][static_cast<int64_t>(t)] = sample.log_probs[t];
      if (per_position > 0 && sample.route_layers == route_shape.layers && sample.route_k == route_shape.picks) {
        const int64_t count = std::min<int64_t>(static_cast<int64_t>(sample.routes.size()), route_width);
        int32_t* into = routes[row].data_ptr<int32_t>();
        for (int64_t i = 0; i < count; ++i) into[i] = sample.routes[static_cast<size_t>(i)] + 1;
      }
      const EpisodeRecord episode = i < slice.episodes.size() ? slice.episodes[i] : EpisodeRecord{};
      int64_t* tail = &view[row][width - kTail];
      tail[0] = static_cast<int64_t>(sample.prompt.size());
      tail[1] = static_cast<int64_t>(sample.response.size());
      tail[2] = sample.stopped_at_eos ? 1 : 0;
      tail[3] = sample.turns;
      tail[4] = sample.policy_mask.empty() ? 0 : 1;
      tail[5] = static_cast<int64_t>(episode.end);
      tail[6] = episode.observations;
      tail[7] = episode.observations_cut;
      float_view[row][max_response] = static_cast<float>(episode.env_reward);
    }
  }
  torch::Tensor shared = rows.to(world.device());
  world.all_reduce(shared);
  rows = shared.cpu();
  torch::Tensor shared_floats = floats.to(world.device());
  world.all_reduce(shared_floats);
  floats = shared_floats.cpu();
  view = rows.accessor<int64_t, 2>();
  float_view = floats.accessor<float, 2>();
  if (per_position > 0) {
    torch::Tensor shared_routes = routes.to(world.device());
    world.all_reduce(shared_routes);
    routes = shared_routes.cpu();
  }
  std::vector<Trajectory> out(static_cast<size_t>(total));
  for (int64_t row = 0; row < total; ++row) {
    Trajectory& trajectory = out[static_cast<size_t>(row)];
    GeneratedSample& sample = trajectory.sample;
    const int64_t* tail = &view[row][width - kTail];
    const int64_t prompt_len = tail[0], response_len = tail[1];
    const bool masked = tail[4] != 0;
    for (int64_t t = 0; t < prompt_len; ++t) sample.prompt.push_back(static_cast<int32_t>(view[row][t]));
    for (int64_t t = 0; t < response_len; ++t) {
      sample.response.push_back(static_cast<int32_t>(view[row][max_prompt + t]));
      sample.log_probs.push_back(float_view[row][t]);
      if (masked) sample.policy_mask.push_back(static_cast<uint8_t>(view[row][max_prompt + max_response + t]));
      if (versions) sample.versions.push_back(view[row][versions_at + t]);
    }
    sample.stopped_at_eos = tail[2] != 0;
    sample.turns = static_cast<int32_t>(tail[3]);
    trajectory.loss_mask = sample.policy_mask;  // the policy's tokens are the loss's
    trajectory.episode.end = static_cast<EpisodeEnd>(tail[5]);
    trajectory.episode.observations = static_cast<int32_t>(tail[6]);
    trajectory.episode.observations_cut = static_cast<int32_t>(tail[7]);
    trajectory.episode.env_reward = float_view[row][max_response];
    if (per_position > 0) {
      // The positions the engine fed: all but the last token.
      const int64_t positions = std::max<int64_t>(0, prompt_len + response_len - 1);
      const int32_t* from = routes[row].data_ptr<int32_t>();
      sample.routes.resize(static_cast<size_t>(positions * per_position));
      for (int64_t i = 0; i < positions * per_position; ++i) sample.routes[static_cast<size_t>(i)] = static_cast<int16_t>(from[i] - 1);
      sample.route_layers = route_shape.layers;
      sample.route_k = route_shape.picks;
    }
  }
  return out;
}

void share_sum(torch::Tensor& tensor, Group& world) {
  torch::Tensor shared = tensor.to(world.device());
  world.all_reduce(shared);
  tensor = shared.to(tensor.device());
}

void send_weights_to_engines(NamedTensors full, const ParameterShapes& shapes, bool engines_hold_actor, int source,
                             const std::vector<LlamaModel*>& engines, Group& world) {
  if (!engines_hold_actor) {
    for (const auto& [name, shape] : shapes) {
      torch::Tensor tensor = world.rank() == source
                                 ? full.at(name).to(world.device(), torch::kFloat).contiguous()
                                 : torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat).device(world.device()));
      world.broadcast(tensor, source);
      if (!engines.empty()) full[name] = tensor.cpu();
    }
  }
  torch::NoGradGuard no_grad;
  for (LlamaModel* engine : engines) scatter_full_state(*engine, full);
}

void on_rank0_or_fail_everywhere(Group& world, const std::string& hook_point, const std::function<void()>& call) {
  std::string failure;
  if (world.rank() == 0) {
    try {
      call();
    } catch (const std::exception& error) {
      failure = error.what();
      if (failure.empty()) failure = "failed";
    }
  }
  failure = dist::broadcast_object(failure, 0, &world);
  if (!failure.empty())
    throw KindError<ErrorKind::hook>("hook " + hook_point + " failed on rank 0, stopping every rank: " + failure);
}

void on_every_rank_or_fail_everywhere(Group& world, const std::string& hook_point, const std::function<void()>& call) {
  std::string failure;
  try {
    call();
  } catch (const std::exception& error) {
    failure = error.what();
    if (failure.empty()) failure = "failed";
  }
  // Who failed: one flag per rank; the first failing rank tells everyone why.
  torch::Tensor failed = torch::zeros({world.size()}, torch::kFloat);
  if (!failure.empty()) failed[world.rank()] = 1;
  share_sum(failed, world);
  const torch::Tensor failing = failed.nonzero();
  if (failing.numel() == 0) return;
  const int first = static_cast<int>(failing[0][0].item<int64_t>());
  failure = dist::broadcast_object(failure, first, &world);
  throw KindError<ErrorKind::hook>("hook " + hook_point + " failed on rank " + std::to_string(first) +
                                   ", stopping every rank: " + failure);
}

}  // namespace meshrun::ppo_detail
