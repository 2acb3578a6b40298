// Built-in model presets, for tests, examples and benchmarks without a model
// on disk. They use the byte-level tokenizer (ids 0..258), so the vocabulary
// is 264: the tokenizer's 259 ids rounded up to a multiple of 8, which also
// splits evenly over tensor-parallel groups of 2, 4 and 8.
#include <array>

#include "meshrun/arch/model_config.hpp"

namespace meshrun {
namespace {

struct Preset {
  std::string_view name;
  int64_t hidden, layers, heads, kv_heads, intermediate, vocab, max_position;
  bool tied_embeddings;
  ModelFamily family;
  int64_t head_dim;  // 0: hidden / heads
  int64_t sliding_window;  // 0: none
  int64_t experts = 0, experts_per_token = 0, expert_intermediate = 0;  // 0: dense
};

// tiny-qwen3 has Qwen3's layout: q_norm/k_norm and heads wider than
// hidden / heads (4 × 32 over a hidden size of 64). tiny-phi3 has Phi-3's:
// fused qkv_proj and gate_up_proj in its files, untied, and a sliding window
// on every layer (Phi-3-mini-4k's 2047) shorter than a training sequence.
// tiny-olmo2 has OLMo 2's: norms after attention and the MLP, none before,
// q/k norms over the whole projections, untied. tiny-moe is a Qwen3-MoE:
// every layer 4 experts of width 64, 2 picked per token (renormalised).
// tiny-gemma2 has Gemma 2's: a window of 32 on layer 0, none on layer 1,
// soft-capping at Gemma 2's 50 and 30, tied.
constexpr std::array<Preset, 7> kPresets{{
    {"builtin:tiny", 64, 2, 4, 2, 176, 264, 512, true, ModelFamily::llama, 0, 0},
    {"builtin:small", 256, 4, 8, 4, 688, 4096, 1024, false, ModelFamily::llama, 0, 0},
    {"builtin:tiny-qwen3", 64, 2, 4, 2, 176, 264, 512, true, ModelFamily::qwen3, 32, 0},
    {"builtin:tiny-phi3", 64, 2, 4, 2, 176, 264, 512, false, ModelFamily::phi3, 0, 32},
    {"builtin:tiny-olmo2", 64, 2, 4, 2, 176, 264, 512, false, ModelFamily::olmo2, 0, 0},
    {"builtin:tiny-moe", 64, 2, 4, 2, 176, 264, 512, false, ModelFamily::qwen3_moe, 0, 0, 4, 2, 64},
    {"builtin:tiny-gemma2", 64, 2, 4, 2, 176, 264, 512, true, ModelFamily::gemma2, 0, 32},
}};

}  // namespace

std::optional<ModelConfig> builtin_model_config(std::string_view name) {
  for (const auto& preset : kPresets) {
    if (preset.name != name) continue;
    ModelConfig c;
    c.hidden = preset.hidden;
    c.layers = preset.layers;
    c.heads = preset.heads;
    c.kv_heads = preset.kv_heads;
    c.intermediate = preset.intermediate;
    c.vocab = preset.vocab;
    c.max_position = preset.max_position;
    c.tied_embeddings = preset.tied_embeddings;
    c.family = preset.family;
    apply_family_layout(c);
    c.explicit_head_dim = preset.head_dim;
    c.sliding_window = preset.sliding_window;
    c.experts = preset.experts;
    c.experts_per_token = preset.experts_per_token;
    c.expert_intermediate = preset.expert_intermediate;
    c.norm_topk_prob = c.experts > 0;
    c.router_aux_loss_coef = model_family_row(c.family).default_aux_loss_coef;
    apply_family_defaults(c);
    c.rms_norm_eps = 1e-5;
    c.bos_token_id = 256;  // the byte tokenizer's <|bos|>, <|eos|>, <|pad|>
    c.eos_token_ids = {257};
    c.pad_token_id = 258;
    return c;
  }
  return std::nullopt;
}

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const auto& preset : kPresets) names.emplace_back(preset.name);
  return names;
}

}  // namespace meshrun
