// Architecture: the shape of a decoder-only transformer (Llama family), as
// much as planning needs: parameter counts, KV-cache size, activation sizes.
//
// An Architecture comes from a model directory's config.json, from the
// built-in table of common public models (looked up by name when the model is
// not on disk), or from a built-in preset ("builtin:tiny"). `source` says
// which, so the plan can tell the user what it assumed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshrun/arch/model_config.hpp"

namespace meshrun {

// The shape fields, parameter counts and config.json parsing are ModelConfig's
// (meshrun/arch/model_config.hpp): the planner and the model read config.json the
// same way.
struct Architecture : ModelConfig {
  std::string name;      // e.g. "Llama-2-70b", "builtin:tiny", or the directory
  std::string source;    // "config.json at PATH", "built-in table", "built-in preset"
};

// Resolves a role's `model` value. Returns nullopt and sets `error` when the
// value is neither a readable model directory, a preset, nor a known name.
std::optional<Architecture> resolve_architecture(const std::string& model, std::string& error);

// Reads a Hugging Face config.json (LlamaForCausalLM, Qwen2ForCausalLM,
// MistralForCausalLM and compatible).
std::optional<Architecture> architecture_from_config_json(const std::string& path,
                                                          std::string& error);

// Names of the built-in public architectures and presets, for messages.
std::vector<std::string> known_architecture_names();

}  // namespace meshrun
