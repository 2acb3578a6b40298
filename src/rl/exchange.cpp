// World exchanges of the PPO step (src/rl/rl_internal.hpp).
#include <spdlog/spdlog.h>

#include "meshrun/model/hf_model.hpp"
#include "rl_internal.hpp"

namespace meshrun::ppo_detail {

RowRange slice_of(int64_t count, int parts, int part) {
  return RowRange{count * part / parts, count * (part + 1) / parts};
}

std::vector<GeneratedSample> share_samples(const std::vector<std::pair<int64_t, std::vector<GeneratedSample>>>& local,
                                           int64_t total, int64_t max_prompt, int64_t max_response, Group& world) {
  // Row layout: prompt ids, response ids, then prompt length, response
  // length, stopped-at-eos; zeros from non-producers add nothing.
  const int64_t width = max_prompt + max_response + 3;
  torch::Tensor rows = torch::zeros({total, width}, torch::kInt64);
  torch::Tensor log_probs = torch::zeros({total, max_response}, torch::kFloat);
  auto view = rows.accessor<int64_t, 2>();
  auto log_prob_view = log_probs.accessor<float, 2>();
  for (const auto& [begin, samples] : local) {
    for (size_t i = 0; i < samples.size(); ++i) {
      const auto& sample = samples[i];
      const int64_t row = begin + static_cast<int64_t>(i);
      if (static_cast<int64_t>(sample.prompt.size()) > max_prompt ||
          static_cast<int64_t>(sample.response.size()) > max_response)
        throw std::logic_error("a generated sample exceeds the rollout's maximum lengths");
      for (size_t t = 0; t < sample.prompt.size(); ++t) view[row][static_cast<int64_t>(t)] = sample.prompt[t];
      for (size_t t = 0; t < sample.response.size(); ++t)
        view[row][max_prompt + static_cast<int64_t>(t)] = sample.response[t];
      for (size_t t = 0; t < sample.log_probs.size() && t < sample.response.size(); ++t)
        log_prob_view[row][static_cast<int64_t>(t)] = sample.log_probs[t];
      view[row][width - 3] = static_cast<int64_t>(sample.prompt.size());
      view[row][width - 2] = static_cast<int64_t>(sample.response.size());
      view[row][width - 1] = sample.stopped_at_eos ? 1 : 0;
    }
  }
  torch::Tensor shared = rows.to(world.device());
  world.all_reduce(shared);
  rows = shared.cpu();
  torch::Tensor shared_log_probs = log_probs.to(world.device());
  world.all_reduce(shared_log_probs);
  log_probs = shared_log_probs.cpu();
  view = rows.accessor<int64_t, 2>();
  log_prob_view = log_probs.accessor<float, 2>();
  std::vector<GeneratedSample> out(static_cast<size_t>(total));
  for (int64_t row = 0; row < total; ++row) {
    GeneratedSample& sample = out[static_cast<size_t>(row)];
    const int64_t prompt_len = view[row][width - 3], response_len = view[row][width - 2];
    for (int64_t t = 0; t < prompt_len; ++t) sample.prompt.push_back(static_cast<int32_t>(view[row][t]));
    for (int64_t t = 0; t < response_len; ++t) {
      sample.response.push_back(static_cast<int32_t>(view[row][max_prompt + t]));
      sample.log_probs.push_back(log_prob_view[row][t]);
    }
    sample.stopped_at_eos = view[row][width - 1] != 0;
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
