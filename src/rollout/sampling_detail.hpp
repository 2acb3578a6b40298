// The tensor-operation form of sample_next_tokens' cut and inverse CDF
// (sampling.cpp), which runs off the CPU; exposed so that the tests hold the
// CPU's radix-select form to it on the same rows.
#pragma once

#include <torch/torch.h>

#include "meshrun/rollout/generation.hpp"

namespace meshrun::sampling_detail {

// Token ids [rows] from probabilities [rows, vocab] (each row summing to 1)
// and uniforms [rows] in [0, 1).
torch::Tensor sample_with_tensors(const torch::Tensor& probabilities, const SamplingOptions& options,
                                  const torch::Tensor& uniforms);

}  // namespace meshrun::sampling_detail
