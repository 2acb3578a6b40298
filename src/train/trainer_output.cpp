// src/train/trainer_output.hpp.
#include "trainer_output.hpp"

#include <filesystem>

#include "meshrun/dist/dist.hpp"

namespace meshrun::train_detail {

torch::Device device_for(const Recipe& recipe) {
  if (recipe.launch.device == "cuda") return torch::Device(torch::kCUDA, static_cast<int8_t>(dist::local_rank()));
  return torch::Device(torch::kCPU);
}

void copy_tokenizer_files(const std::string& tokenizer_source, const std::string& output) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(tokenizer_source, error)) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
                           "generation_config.json"}) {
    const fs::path from = fs::path(tokenizer_source) / name;
    if (fs::exists(from, error)) fs::copy_file(from, fs::path(output) / name, fs::copy_options::overwrite_existing);
  }
}

}  // namespace meshrun::train_detail
