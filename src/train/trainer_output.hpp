// What the SFT and PPO trainers share about where they run and what they
// leave behind. Internal to src/train.
#pragma once

#include <string>

#include <torch/torch.h>

#include "meshrun/recipe/recipe.hpp"

namespace meshrun::train_detail {

// cuda:<local rank> for launch.device = "cuda", else the CPU.
torch::Device device_for(const Recipe& recipe);

// The tokenizer's own files (when it came from a directory) copied next to
// the weights in `output`, so the output directory is a complete model (for
// `meshrun generate`, transformers, or another run).
void copy_tokenizer_files(const std::string& tokenizer_source, const std::string& output);

}  // namespace meshrun::train_detail
