// Helpers shared by the hooks tests: fixture paths, and a scratch folder for
// scripts written by the test itself (sandbox cases, symbolic links).
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>

#include "meshrun/hooks/hooks.hpp"

namespace meshrun::hooks_test {

inline std::string fixture(const std::string& name) {
  return std::string(MESHRUN_SOURCE_DIR) + "/tests/hooks/scripts/" + name;
}

class ScratchFolder {
 public:
  ScratchFolder() {
    static std::atomic<int> counter = 0;
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    root_ = std::filesystem::temp_directory_path() /
            ("meshrun-hooks-" + std::to_string(stamp) + "-" + std::to_string(counter++));
    folder_ = root_ / "scripts";
    std::filesystem::create_directories(folder_);
    // Canonical, so the paths tests build match what the sandbox resolves.
    folder_ = std::filesystem::canonical(folder_);
    root_ = folder_.parent_path();
  }
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  // The folder scripts live in; its parent (root) is "outside".
  const std::filesystem::path& folder() const { return folder_; }
  const std::filesystem::path& root() const { return root_; }

  std::string write(const std::filesystem::path& relative, const std::string& text) const {
    const std::filesystem::path path = folder_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

  std::string write_outside(const std::string& name, const std::string& text) const {
    const std::filesystem::path path = root_ / name;
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

 private:
  std::filesystem::path root_;
  std::filesystem::path folder_;
};

// Loads and returns the HookError it throws; fails the test when none is.
inline HookError load_failure(const std::string& path, const HookOptions& options = {}) {
  try {
    HookScript::load(path, options);
  } catch (const HookError& error) {
    return error;
  }
  throw std::logic_error("expected " + path + " to fail loading");
}

}  // namespace meshrun::hooks_test
