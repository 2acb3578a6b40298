// Presets are the model's (src/arch/presets.cpp). Shapes are copied from
// each model's published config.json on the Hugging
// Face Hub. Where a base and an instruct release disagree on the advertised
// context (Qwen2.5 7B and larger: 131072 vs 32768), the smaller one is used so
// that the rollout.max-length warning errs on the safe side.
#include "architecture_table.hpp"

#include <algorithm>
#include <array>
#include <cctype>

namespace meshrun::arch_detail {
namespace {

struct Shape {
  int64_t hidden, layers, heads, kv_heads, intermediate, vocab, max_position;
  bool tied_embeddings;
  bool qkv_bias;
  double rope_theta;
  ModelFamily family;
  int64_t head_dim;  // 0: hidden / heads
  int64_t sliding_window;  // on every layer; 0: none
  // Mixtures of experts: experts, picked per token, expert width,
  // norm_topk_prob (0, 0, 0, false: dense).
  int64_t experts = 0, experts_per_token = 0, expert_intermediate = 0;
  bool norm_topk_prob = false;
};

struct TableEntry {
  std::string_view name;
  std::string_view alias;  // another spelling of the same shape; may be empty
  Shape shape;
};

Architecture make_architecture(std::string_view name, std::string_view source, const Shape& s) {
  Architecture a;
  a.name = std::string(name);
  a.source = std::string(source);
  a.hidden = s.hidden;
  a.layers = s.layers;
  a.heads = s.heads;
  a.kv_heads = s.kv_heads;
  a.intermediate = s.intermediate;
  a.vocab = s.vocab;
  a.max_position = s.max_position;
  a.tied_embeddings = s.tied_embeddings;
  a.qkv_bias = s.qkv_bias;
  a.rope_theta = s.rope_theta;
  a.family = s.family;
  apply_family_layout(a);
  if (s.head_dim != 0 && s.head_dim * s.heads != s.hidden) a.explicit_head_dim = s.head_dim;
  a.sliding_window = s.sliding_window;
  a.experts = s.experts;
  a.experts_per_token = s.experts_per_token;
  a.expert_intermediate = s.expert_intermediate;
  a.norm_topk_prob = s.norm_topk_prob || model_family_row(s.family).always_norm_topk;
  a.router_aux_loss_coef = model_family_row(s.family).default_aux_loss_coef;
  apply_family_defaults(a);
  return a;
}

const std::array<TableEntry, 29>& public_models() {
  // clang-format off
  static const std::array<TableEntry, 29> table{{
      {"Llama-2-7b",    {}, {4096, 32, 32, 32, 11008, 32000, 4096, false, false, 10000, ModelFamily::llama, 0, 0}},
      {"Llama-2-13b",   {}, {5120, 40, 40, 40, 13824, 32000, 4096, false, false, 10000, ModelFamily::llama, 0, 0}},
      {"Llama-2-70b",   {}, {8192, 80, 64,  8, 28672, 32000, 4096, false, false, 10000, ModelFamily::llama, 0, 0}},
      {"Llama-3-8B",    {}, {4096, 32, 32,  8, 14336, 128256, 8192, false, false, 500000, ModelFamily::llama, 0, 0}},
      {"Llama-3-70B",   {}, {8192, 80, 64,  8, 28672, 128256, 8192, false, false, 500000, ModelFamily::llama, 0, 0}},
      {"Llama-3.1-8B",  {}, {4096, 32, 32,  8, 14336, 128256, 131072, false, false, 500000, ModelFamily::llama, 0, 0}},
      {"Llama-3.1-70B", {}, {8192, 80, 64,  8, 28672, 128256, 131072, false, false, 500000, ModelFamily::llama, 0, 0}},
      {"Qwen2.5-0.5B",  {}, { 896, 24, 14,  2,  4864, 151936, 32768, true,  true, 1000000, ModelFamily::qwen2, 0, 0}},
      {"Qwen2.5-1.5B",  {}, {1536, 28, 12,  2,  8960, 151936, 32768, true,  true, 1000000, ModelFamily::qwen2, 0, 0}},
      {"Qwen2.5-3B",    {}, {2048, 36, 16,  2, 11008, 151936, 32768, true,  true, 1000000, ModelFamily::qwen2, 0, 0}},
      {"Qwen2.5-7B",    {}, {3584, 28, 28,  4, 18944, 152064, 32768, false, true, 1000000, ModelFamily::qwen2, 0, 0}},
      {"Qwen2.5-14B",   {}, {5120, 48, 40,  8, 13824, 152064, 32768, false, true, 1000000, ModelFamily::qwen2, 0, 0}},
      {"Qwen2.5-32B",   {}, {5120, 64, 40,  8, 27648, 152064, 32768, false, true, 1000000, ModelFamily::qwen2, 0, 0}},
      {"Qwen2.5-72B",   {}, {8192, 80, 64,  8, 29568, 152064, 32768, false, true, 1000000, ModelFamily::qwen2, 0, 0}},
      {"Qwen3-0.6B",    {}, {1024, 28, 16,  8,  3072, 151936, 40960, true,  false, 1000000, ModelFamily::qwen3, 128, 0}},
      {"Qwen3-1.7B",    {}, {2048, 28, 16,  8,  6144, 151936, 40960, true,  false, 1000000, ModelFamily::qwen3, 128, 0}},
      {"Qwen3-4B",      {}, {2560, 36, 32,  8,  9728, 151936, 40960, true,  false, 1000000, ModelFamily::qwen3, 128, 0}},
      {"Qwen3-8B",      {}, {4096, 36, 32,  8, 12288, 151936, 40960, false, false, 1000000, ModelFamily::qwen3, 128, 0}},
      {"Qwen3-14B",     {}, {5120, 40, 40,  8, 17408, 151936, 40960, false, false, 1000000, ModelFamily::qwen3, 128, 0}},
      {"Qwen3-32B",     {}, {5120, 64, 64,  8, 25600, 151936, 40960, false, false, 1000000, ModelFamily::qwen3, 128, 0}},
      // v0.1 is what "Mistral-7B" meant for most of its life; v0.2+ changed vocab/rope.
      {"Mistral-7B-v0.1", {"Mistral-7B"},
                            {4096, 32, 32,  8, 14336, 32000, 32768, false, false, 10000, ModelFamily::mistral, 0, 4096}},
      // Phi-3 has no base release; its window of 2047 is on every layer.
      {"Phi-3-mini-4k-instruct", {},
                            {3072, 32, 32, 32,  8192, 32064, 4096, false, false, 10000, ModelFamily::phi3, 0, 2047}},
      {"phi-4",         {}, {5120, 40, 40, 10, 17920, 100352, 16384, false, false, 250000, ModelFamily::phi3, 0, 0}},
      // OLMo 2's 7B (the November 2024 release); q/k norms over the full width.
      {"OLMo-2-1124-7B", {"OLMo-2-7B"},
                            {4096, 32, 32, 32, 11008, 100352, 4096, false, false, 500000, ModelFamily::olmo2, 0, 0}},
      // Gemma 2's 9B: a 4096 window on every other layer, 256-wide heads.
      {"gemma-2-9b",     {}, {3584, 42, 16,  8, 14336, 256000, 8192, true, false, 10000, ModelFamily::gemma2, 256, 4096}},
      // Gemma 3's 12B (text): a 1024 window on 5 of every 6 layers, with their own rotary base.
      {"gemma-3-12b",   {"gemma-3-12b-pt"},
                            {3840, 48, 16,  8, 15360, 262208, 131072, true, false, 1000000, ModelFamily::gemma3_text, 256, 1024}},
      // Mixtures of experts: every layer sparse.
      {"Qwen3-30B-A3B", {},  {2048, 48, 32,  4,  6144, 151936, 40960, false, false, 1000000, ModelFamily::qwen3_moe, 128, 0,
                              128, 8, 768, true}},
      {"Mixtral-8x7B-v0.1", {"Mixtral-8x7B"},
                            {4096, 32, 32,  8, 14336, 32000, 32768, false, false, 1000000, ModelFamily::mixtral, 0, 0,
                              8, 2, 14336, true}},
      {"OLMoE-1B-7B-0924", {"OLMoE-1B-7B"},
                            {2048, 16, 16, 16,  1024, 50304, 4096, false, false, 10000, ModelFamily::olmoe, 0, 0,
                              64, 8, 1024, false}},
  }};
  // clang-format on
  return table;
}

bool is_variant_word(std::string_view word) {
  return word == "hf" || word == "chat" || word == "instruct" || word == "base";
}

}  // namespace

std::string normalized_model_name(std::string_view name) {
  if (size_t slash = name.find_last_of('/'); slash != std::string_view::npos)
    name.remove_prefix(slash + 1);
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });

  std::string out;
  size_t start = 0;
  bool first = true;
  while (start <= lower.size()) {
    size_t dash = lower.find('-', start);
    if (dash == std::string::npos) dash = lower.size();
    std::string_view word(lower.data() + start, dash - start);
    // "Meta-Llama-3-8B" and "Llama-3-8B" are the same checkpoint under two names.
    bool drop = is_variant_word(word) || (first && word == "meta") || word.empty();
    if (!drop) {
      if (!out.empty()) out += '-';
      out += word;
    }
    first = false;
    start = dash + 1;
  }
  return out;
}

std::optional<Architecture> builtin_preset(std::string_view name) {
  auto config = builtin_model_config(name);
  if (!config) return std::nullopt;
  Architecture a;
  static_cast<ModelConfig&>(a) = *config;
  a.name = std::string(name);
  a.source = "built-in preset";
  return a;
}

std::optional<Architecture> builtin_public_architecture(std::string_view name) {
  const std::string wanted = normalized_model_name(name);
  if (wanted.empty()) return std::nullopt;
  for (const auto& entry : public_models()) {
    bool match = normalized_model_name(entry.name) == wanted;
    if (!entry.alias.empty()) match = match || normalized_model_name(entry.alias) == wanted;
    if (match) return make_architecture(entry.name, "built-in table", entry.shape);
  }
  return std::nullopt;
}

std::vector<std::string> builtin_architecture_names() {
  std::vector<std::string> names = builtin_model_names();
  for (const auto& entry : public_models()) names.emplace_back(entry.name);
  return names;
}

}  // namespace meshrun::arch_detail
