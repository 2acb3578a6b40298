// Test support: a fresh directory under the system temp dir, unique per
// object (pid, counter and random bits in its name), removed with
// everything in it when the object goes away.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>

namespace meshrun::test {

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device device;
    path_ = std::filesystem::temp_directory_path() /
            ("meshrun-test-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + "-" +
             std::to_string(device()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside (not created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string operator/(const std::string& name) const { return file(name); }
  // Writes `contents` (bytes as given) to `name` inside, creating folders.
  std::filesystem::path write(const std::string& name, std::string_view contents) const {
    const auto target = path_ / name;
    std::filesystem::create_directories(target.parent_path());
    std::ofstream(target, std::ios::binary) << contents;
    return target;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace meshrun::test
