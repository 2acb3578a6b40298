// The projections a LoRA adapter may target ([roles.NAME] lora_targets), by
// their Hugging Face module name: the recipe's vocabulary for that key,
// which the rules check names against and the model (arch/lora.hpp)
// attaches adapters by. Torch-free, on the ground floor (recipe/).
#pragma once

#include <string_view>

namespace meshrun {

inline constexpr std::string_view kLoraTargets[] = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                                    "gate_proj", "up_proj", "down_proj"};

// Whether `name` is one of kLoraTargets.
constexpr bool is_lora_target(std::string_view name) {
  for (std::string_view target : kLoraTargets)
    if (target == name) return true;
  return false;
}

}  // namespace meshrun
