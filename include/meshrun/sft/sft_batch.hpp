// MicroBatch (plain arrays from the data pipeline) → tensors for the model
// and the shifted labels of the SFT loss. Internal to src/train.
#pragma once

#include <torch/torch.h>

#include "meshrun/data/data.hpp"
#include "meshrun/model/model.hpp"

namespace meshrun::train_detail {

inline constexpr int64_t kIgnoreLabel = -100;

struct SftTensors {
  ModelInputs inputs;
  // labels[r][t] = input_ids[r][t+1] where loss_mask[r][t+1] is 1, else
  // kIgnoreLabel (and always at the last column): the logits at t predict
  // the next token.
  torch::Tensor labels;
};

// Throws ModelInputError for an input id outside [0, vocab) (checked here,
// on the host: the inputs come marked ids_checked, so the model reads
// nothing back); off the CPU the tensors are copied without the host
// waiting (pinned memory).
SftTensors to_tensors(const MicroBatch& batch, const torch::Device& device, int64_t vocab);

}  // namespace meshrun::train_detail
