// LoRA (Hu et al.): low-rank adapters on a decoder's projections, trained
// while the base weights stay frozen. A targeted projection W [out, in]
// computes W·x + (alpha / rank)·B·(A·dropout(x)) with A [rank, in] and B
// [out, rank]; A starts as nn.Linear's default (kaiming-uniform, a = √5,
// so uniform ±1/√in) and B at zero, so a fresh adapter changes nothing.
//
// Under tensor parallelism A and B are split like the weight they adapt: a
// column-parallel projection (q, k, v, gate, up: W split along out) splits B
// along out and keeps A whole; a row-parallel one (o, down: W split along
// in) splits A along in and keeps B whole. The whole factor's gradient is
// a partial sum on each rank and is all-reduced over tp in backward.
//
// This header is torch-free: the settings, the module names and the
// adapter's size serve the recipe rules and the plan as well as the model.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/arch/model_config.hpp"
#include "meshrun/recipe/lora_targets.hpp"  // kLoraTargets, is_lora_target

namespace meshrun {

struct LoraSettings {
  int rank = 0;  // 0: no adapters
  double alpha = 16;
  double dropout = 0;
  std::vector<std::string> targets;  // names from kLoraTargets
  bool rslora = false;  // rank-stabilised scale alpha / √rank (read from PEFT files)

  bool enabled() const { return rank > 0; }
  double scale() const { return rslora ? alpha / std::sqrt(static_cast<double>(rank)) : alpha / rank; }
  bool targets_module(std::string_view module) const;
};

// [in, out] of a target projection of `config` (full, unsplit).
struct ProjectionShape {
  int64_t in = 0, out = 0;
};
ProjectionShape lora_projection_shape(const ModelConfig& config, std::string_view target);

// Adapter parameters (A and B of every targeted projection of every layer).
int64_t lora_parameter_count(const ModelConfig& config, const LoraSettings& lora);

}  // namespace meshrun
