#include "meshrun/sft/sft_batch.hpp"

namespace meshrun::train_detail {
namespace {

torch::Tensor int64_matrix(const std::vector<int32_t>& values, const MicroBatch& batch) {
  return torch::from_blob(const_cast<int32_t*>(values.data()), {batch.rows, batch.length}, torch::kInt32)
      .to(torch::kInt64);
}

}  // namespace

SftTensors to_tensors(const MicroBatch& batch, const torch::Device& device) {
  SftTensors out;
  auto ids = int64_matrix(batch.input_ids, batch);
  auto mask = int64_matrix(batch.loss_mask, batch);
  out.inputs.input_ids = ids.to(device);
  out.inputs.position_ids = int64_matrix(batch.position_ids, batch).to(device);
  out.inputs.sequence_ids = int64_matrix(batch.sequence_ids, batch).to(device);
  out.inputs.attention_mask = int64_matrix(batch.attention_mask, batch).to(device);

  auto labels = torch::full({batch.rows, batch.length}, kIgnoreLabel, torch::kInt64);
  if (batch.length > 1) {
    using torch::indexing::Slice;
    auto next_ids = ids.index({Slice(), Slice(1, torch::indexing::None)});
    auto next_mask = mask.index({Slice(), Slice(1, torch::indexing::None)});
    labels.index_put_({Slice(), Slice(0, batch.length - 1)},
                      torch::where(next_mask.eq(1), next_ids, torch::full_like(next_ids, kIgnoreLabel)));
  }
  out.labels = labels.to(device);
  return out;
}

}  // namespace meshrun::train_detail
