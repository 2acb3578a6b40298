// GeneratedSample lists → the padded tensors PPO scores and trains on.
#include <algorithm>
#include <vector>

#include "meshrun/rollout/generation.hpp"

namespace meshrun {

SequenceBatch pack_samples(std::span<const GeneratedSample> samples, int64_t pad_id, const torch::Device& device) {
  std::vector<const GeneratedSample*> rows;
  rows.reserve(samples.size());
  for (const GeneratedSample& sample : samples) rows.push_back(&sample);
  return pack_samples(std::span<const GeneratedSample* const>(rows), pad_id, device);
}

SequenceBatch pack_samples(std::span<const GeneratedSample* const> samples, int64_t pad_id,
                           const torch::Device& device) {
  SequenceBatch batch;
  for (const GeneratedSample* row : samples) {
    const GeneratedSample& sample = *row;
    batch.prompt_len = std::max<int64_t>(batch.prompt_len, static_cast<int64_t>(sample.prompt.size()));
    batch.response_len = std::max<int64_t>(batch.response_len, static_cast<int64_t>(sample.response.size()));
  }
  const int64_t n = static_cast<int64_t>(samples.size()), width = batch.prompt_len + batch.response_len;
  torch::Tensor sequences = torch::full({n, width}, pad_id, torch::kInt64);
  torch::Tensor attention = torch::zeros({n, width}, torch::kInt64);
  torch::Tensor response = torch::zeros({n, batch.response_len}, torch::kInt64);
  auto ids = sequences.accessor<int64_t, 2>();
  auto mask = attention.accessor<int64_t, 2>();
  auto response_mask = response.accessor<int64_t, 2>();
  for (int64_t row = 0; row < n; ++row) {
    const GeneratedSample& sample = *samples[static_cast<size_t>(row)];
    const int64_t offset = batch.prompt_len - static_cast<int64_t>(sample.prompt.size());
    for (size_t i = 0; i < sample.prompt.size(); ++i) {
      ids[row][offset + static_cast<int64_t>(i)] = sample.prompt[i];
      mask[row][offset + static_cast<int64_t>(i)] = 1;
    }
    for (size_t i = 0; i < sample.response.size(); ++i) {
      const int64_t column = batch.prompt_len + static_cast<int64_t>(i);
      ids[row][column] = sample.response[i];
      mask[row][column] = 1;
      response_mask[row][static_cast<int64_t>(i)] = 1;
    }
  }
  batch.sequences = sequences.to(device);
  batch.attention_mask = attention.to(device);
  batch.response_mask = response.to(device);
  int32_t layers = 0, picks = 0;
  for (const GeneratedSample* sample : samples)
    if (sample->routed_positions() > 0) layers = sample->route_layers, picks = sample->route_k;
  if (layers == 0) return batch;
  torch::Tensor routes = torch::full({n, width, layers, picks}, -1, torch::kInt64);
  auto into = routes.accessor<int64_t, 4>();
  for (int64_t row = 0; row < n; ++row) {
    const GeneratedSample& sample = *samples[static_cast<size_t>(row)];
    if (sample.route_layers != layers || sample.route_k != picks) continue;  // none recorded
    const int64_t offset = batch.prompt_len - static_cast<int64_t>(sample.prompt.size());
    const int64_t positions = std::min(sample.routed_positions(), width - offset);
    for (int64_t p = 0; p < positions; ++p)
      for (int32_t l = 0; l < layers; ++l)
        for (int32_t j = 0; j < picks; ++j)
          into[row][offset + p][l][j] = sample.routes[static_cast<size_t>((p * layers + l) * picks + j)];
  }
  batch.routes = routes.to(device);
  return batch;
}

}  // namespace meshrun
