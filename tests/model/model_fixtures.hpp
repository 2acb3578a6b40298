// Shared by the model tests: a temporary folder, small configs, and a
// comparison that reports the largest difference.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "meshrun/arch/model_config.hpp"
#include "support/temp_dir.hpp"

namespace model_test {

using TempDir = meshrun::test::TempDir;

// A small Llama: GQA (4 heads, 2 kv heads), untied, vocab 48.
inline meshrun::ModelConfig small_config() {
  meshrun::ModelConfig c;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.intermediate = 48;
  c.vocab = 48;
  c.max_position = 64;
  c.rms_norm_eps = 1e-5;
  return c;
}

// The layouts the paged decode paths are held to, each named: Llama,
// Qwen2 (biases, tied embeddings), Mistral's window, Qwen3 (q/k norms,
// heads wider than hidden / heads), Phi-3 (a window on every layer),
// Gemma 3's mixed windows (layer 0 local with its own rotary base) and
// Gemma 2's soft-capped scores on top.
inline std::vector<std::pair<std::string, meshrun::ModelConfig>> paged_attention_configs() {
  using meshrun::ModelFamily;
  std::vector<std::pair<std::string, meshrun::ModelConfig>> out;
  meshrun::ModelConfig config = small_config();
  out.emplace_back("llama", config);
  config.family = ModelFamily::qwen2;
  config.qkv_bias = true;
  config.tied_embeddings = true;
  out.emplace_back("qwen2", config);
  config = small_config();
  config.family = ModelFamily::mistral;
  config.sliding_window = 3;
  out.emplace_back("mistral", config);
  config = small_config();
  config.family = ModelFamily::qwen3;
  config.qk_norm = true;
  config.explicit_head_dim = 2 * config.head_dim();
  out.emplace_back("qwen3", config);
  config = small_config();
  config.family = ModelFamily::phi3;
  config.sliding_window = 2;
  out.emplace_back("phi3", config);
  config = small_config();
  config.sliding_window = 2;
  config.windowed_layers = {true, false};
  config.window_rope_theta = 100;
  out.emplace_back("mixed windows", config);
  config.attn_softcap = 1.5;
  out.emplace_back("mixed windows, soft-capped", config);
  return out;
}

}  // namespace model_test
