#include "meshrun/sft/sft_batch.hpp"

#include <string>

namespace meshrun::train_detail {
namespace {

torch::Tensor int64_matrix(const std::vector<int32_t>& values, const MicroBatch& batch) {
  return torch::from_blob(const_cast<int32_t*>(values.data()), {batch.rows, batch.length}, torch::kInt32)
      .to(torch::kInt64);
}

}  // namespace

SftTensors to_tensors(const MicroBatch& batch, const torch::Device& device, int64_t vocab) {
  for (const int32_t id : batch.input_ids)
    if (id < 0 || id >= vocab)
      throw ModelInputError("input id " + std::to_string(id) + " is outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
  // Off the CPU through pinned memory without waiting: a copy from pageable
  // memory makes the host wait for the device (a sync per tensor).
  const auto upload = [&](const torch::Tensor& host) {
    return device.is_cpu() ? host : host.pin_memory().to(device, /*non_blocking=*/true);
  };
  SftTensors out;
  auto ids = int64_matrix(batch.input_ids, batch);
  auto mask = int64_matrix(batch.loss_mask, batch);
  out.inputs.input_ids = upload(ids);
  out.inputs.position_ids = upload(int64_matrix(batch.position_ids, batch));
  out.inputs.sequence_ids = upload(int64_matrix(batch.sequence_ids, batch));
  out.inputs.attention_mask = upload(int64_matrix(batch.attention_mask, batch));
  // Checked above, labels included (each is an input id or the ignore label).
  out.inputs.ids_checked = true;
  auto labels = torch::full({batch.rows, batch.length}, kIgnoreLabel, torch::kInt64);
  if (batch.length > 1) {
    using torch::indexing::Slice;
    auto next_ids = ids.index({Slice(), Slice(1, torch::indexing::None)});
    auto next_mask = mask.index({Slice(), Slice(1, torch::indexing::None)});
    labels.index_put_({Slice(), Slice(0, batch.length - 1)},
                      torch::where(next_mask.eq(1), next_ids, torch::full_like(next_ids, kIgnoreLabel)));
  }
  out.labels = upload(labels);
  return out;
}

}  // namespace meshrun::train_detail
