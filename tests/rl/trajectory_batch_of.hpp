// Test support: a TrajectoryBatch whose loss mask, kept flags and model
// rewards are given as tensors (each response ends at its row's last 1;
// its loss_mask is the row up to there), for Experience tests written in
// tensors.
#pragma once

#include "meshrun/rl/trajectory.hpp"

namespace meshrun::test {

inline TrajectoryBatch trajectory_batch_of(const torch::Tensor& mask, const torch::Tensor& keep,
                                           const torch::Tensor& model_rewards) {
  TrajectoryBatch batch;
  const torch::Tensor mask_cpu = mask.to(torch::kCPU, torch::kFloat).contiguous();
  for (int64_t row = 0; row < mask.size(0); ++row) {
    Trajectory trajectory;
    trajectory.sample.prompt = {1};
    int64_t length = 0;
    for (int64_t t = 0; t < mask.size(1); ++t)
      if (mask_cpu[row][t].item<float>() != 0) length = t + 1;
    for (int64_t t = 0; t < length; ++t) {
      trajectory.sample.response.push_back(2);
      trajectory.loss_mask.push_back(mask_cpu[row][t].item<float>() != 0 ? 1 : 0);
    }
    trajectory.kept = keep[row].item<float>() != 0;
    trajectory.model_reward = model_rewards[row].item<float>();
    batch.trajectories.push_back(std::move(trajectory));
  }
  batch.pack(0, torch::kCPU);
  return batch;
}

}  // namespace meshrun::test
