// The torch-free half of meshrun/arch/lora.hpp: target names and sizes.
#include "meshrun/arch/lora.hpp"

#include <algorithm>
#include <stdexcept>

namespace meshrun {

bool LoraSettings::targets_module(std::string_view module) const {
  return std::find(targets.begin(), targets.end(), module) != targets.end();
}

ProjectionShape lora_projection_shape(const ModelConfig& config, std::string_view target) {
  const int64_t q = config.heads * config.head_dim();
  if (target == "q_proj") return {config.hidden, q};
  if (target == "k_proj" || target == "v_proj") return {config.hidden, config.kv_dim()};
  if (target == "o_proj") return {q, config.hidden};
  if (target == "gate_proj" || target == "up_proj") return {config.hidden, config.intermediate};
  if (target == "down_proj") return {config.intermediate, config.hidden};
  throw std::logic_error("\"" + std::string(target) + "\" is not a LoRA target");
}

int64_t lora_parameter_count(const ModelConfig& config, const LoraSettings& lora) {
  if (!lora.enabled()) return 0;
  int64_t total = 0;
  for (const std::string& target : lora.targets) {
    if (!is_lora_target(target)) continue;
    const ProjectionShape shape = lora_projection_shape(config, target);
    // A mixture's sparse layers have experts in place of the MLP, which take none.
    const bool mlp = target == "gate_proj" || target == "up_proj" || target == "down_proj";
    total += lora.rank * (shape.in + shape.out) * (mlp ? config.layers - config.sparse_layers() : config.layers);
  }
  return total;
}

}  // namespace meshrun
