// Shared by the model tests: a temporary folder, small configs, and a
// comparison that reports the largest difference.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

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

}  // namespace model_test
