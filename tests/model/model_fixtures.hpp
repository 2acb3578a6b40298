// Shared by the model tests: a temporary folder, small configs, and a
// comparison that reports the largest difference.
#pragma once

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "meshrun/model_config.hpp"

namespace model_test {

class TempDir {
 public:
  TempDir() {
    std::random_device device;
    path_ = std::filesystem::temp_directory_path() /
            ("meshrun-model-test-" + std::to_string(device()) + "-" + std::to_string(device()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::filesystem::path write(const std::string& name, const std::string& contents) const {
    const auto target = path_ / name;
    std::filesystem::create_directories(target.parent_path());
    std::ofstream(target, std::ios::binary) << contents;
    return target;
  }

 private:
  std::filesystem::path path_;
};

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
