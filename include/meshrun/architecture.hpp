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

namespace meshrun {

struct Architecture {
  std::string name;      // e.g. "Llama-2-70b", "builtin:tiny", or the directory
  std::string source;    // "config.json at PATH", "built-in table", "built-in preset"
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t intermediate = 0;
  int64_t vocab = 0;
  int64_t max_position = 0;
  bool tied_embeddings = false;
  bool qkv_bias = false;  // Qwen2
  double rope_theta = 10000;

  int64_t head_dim() const { return hidden / heads; }
  int64_t kv_dim() const { return kv_heads * head_dim(); }
  // Parameters of the language model (embedding, layers, norm, lm_head unless tied).
  int64_t parameters() const;
  // Parameters with a scalar value head in place of the lm_head (critic, reward).
  int64_t parameters_with_value_head() const;
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
