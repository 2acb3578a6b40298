// Committing, finding, verifying, rotating and choosing checkpoints
// (include/meshrun/ckpt/checkpoint.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kPrefix = "global_step_";
constexpr std::string_view kPartialPrefix = ".partial-global_step_";

std::optional<int64_t> step_of(const std::string& name, std::string_view prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  // A number past int64 is no step of ours: the folder is left alone, not an error for the whole root.
  int64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

std::string read_text(const fs::path& path) {
  // Manifests and state files are small JSON; 64 MiB bounds a damaged or
  // substituted file.
  constexpr std::size_t kMaxBytes = std::size_t{64} << 20;
  BoundedText read = read_bounded(path.string(), kMaxBytes);
  if (read.status == BoundedText::Status::unreadable) throw CheckpointError("cannot read " + path.string());
  if (!read.ok()) throw CheckpointError(path.string() + " " + read.problem(kMaxBytes) + ": not a checkpoint file");
  return std::move(read.text);
}

void write_atomically(const fs::path& path, const std::string& text) { write_file_atomically(path.string(), text); }

// Every regular file under `dir`, relative, sorted; the manifest left out.
std::vector<std::string> files_under(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) {
      std::string name = fs::relative(entry.path(), dir).generic_string();
      if (name != "manifest.json") names.push_back(std::move(name));
    }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::string CheckpointDir::partial_path(int64_t step) const {
  return (fs::path(root_) / (std::string(kPartialPrefix) + std::to_string(step))).string();
}

std::string CheckpointDir::final_path(int64_t step) const {
  return (fs::path(root_) / (std::string(kPrefix) + std::to_string(step))).string();
}

std::string CheckpointDir::begin(int64_t step) const {
  const std::string path = partial_path(step);
  std::error_code error;
  fs::remove_all(path, error);
  fs::create_directories(path, error);
  if (error) throw CheckpointError("cannot create " + path + ": " + error.message());
  return path;
}

CheckpointManifest CheckpointDir::commit(int64_t step, CheckpointManifest info) const {
  const fs::path partial = partial_path(step), final = final_path(step);
  if (!fs::is_directory(partial)) throw CheckpointError("no partial checkpoint at " + partial.string());
  info.global_step = step;
  info.files.clear();
  for (const std::string& name : files_under(partial)) {
    // The manifest is JSON text: a file name that is not UTF-8 (none of
    // meshrun's own; something else put it here) cannot be recorded, so the
    // checkpoint is refused rather than sealed without that file.
    try {
      (void)nlohmann::json(name).dump();
    } catch (const nlohmann::json::type_error&) {
      throw CheckpointError("cannot commit " + partial.string() + ": the file name " +
                            nlohmann::json(name).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                            " is not UTF-8 (meshrun writes no such file; remove it and save again)");
    }
    const fs::path file = partial / name;
    fsync_path(file.string());
    info.files.push_back({name, static_cast<int64_t>(fs::file_size(file)), file_checksum(file.string())});
  }
  write_atomically(partial / "manifest.json", info.to_json());
  for (const auto& entry : fs::recursive_directory_iterator(partial))
    if (entry.is_directory()) fsync_path(entry.path().string());
  fsync_path(partial.string());
  std::error_code error;
  if (fs::exists(final)) fs::remove_all(final, error);
  fs::rename(partial, final, error);
  if (error) throw CheckpointError("cannot rename " + partial.string() + " to " + final.string() + ": " + error.message());
  fsync_path(root_);
  return info;
}

std::vector<int64_t> CheckpointDir::complete_steps() const {
  std::vector<int64_t> steps;
  std::error_code error;
  if (!fs::is_directory(root_, error)) return steps;
  for (const auto& entry : fs::directory_iterator(root_, error)) {
    const auto step = step_of(entry.path().filename().string(), kPrefix);
    if (step && entry.is_directory() && fs::is_regular_file(entry.path() / "manifest.json")) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

CheckpointManifest CheckpointDir::manifest(int64_t step) const {
  const fs::path path = fs::path(final_path(step)) / "manifest.json";
  return CheckpointManifest::from_json(read_text(path), path.string());
}

namespace {

// The manifest of `step` into `out`; what is wrong with it, or empty.
std::string read_manifest(const CheckpointDir& dir, int64_t step, CheckpointManifest& out) {
  try {
    out = dir.manifest(step);
  } catch (const CheckpointError& error) {
    return error.what();
  }
  // A folder renamed or copied under another step's name: resuming it
  // would restart the schedule, sampler and cadence at the wrong step.
  if (out.global_step != step)
    return dir.final_path(step) + "/manifest.json says global_step " + std::to_string(out.global_step) +
           ", but the folder names step " + std::to_string(step) + " (renamed or copied from another checkpoint)";
  return "";
}

// The first file under `dir` that `manifest` does not list, as a problem.
std::string unlisted_in(const std::string& dir, const CheckpointManifest& manifest) {
  std::vector<std::string> listed;
  for (const auto& file : manifest.files) listed.push_back(file.name);
  std::sort(listed.begin(), listed.end());
  try {
    for (const std::string& name : files_under(dir))
      if (!std::binary_search(listed.begin(), listed.end(), name))
        return dir + "/" + name + " is not listed in its manifest.json (added after the checkpoint was sealed, "
                                  "or the manifest was altered)";
  } catch (const fs::filesystem_error& error) {
    return dir + " cannot be listed: " + error.what();
  }
  return "";
}


std::string check_file(const fs::path& dir, const CheckpointFileInfo& file) {
  const fs::path path = dir / file.name;
  std::error_code error;
  const auto size = fs::file_size(path, error);
  if (error) return path.string() + " is missing";
  if (static_cast<int64_t>(size) != file.bytes)
    return path.string() + " has " + std::to_string(size) + " bytes, the manifest says " + std::to_string(file.bytes);
  try {
    const std::string checksum = file_checksum(path.string());
    if (checksum != file.xxh3)
      return path.string() + " has checksum " + checksum + ", the manifest says " + file.xxh3 + " (corrupted)";
  } catch (const CheckpointError& failure) {
    return failure.what();
  }
  return "";
}

}  // namespace

std::string CheckpointDir::verify(int64_t step) const {
  CheckpointManifest manifest;
  if (std::string problem = read_manifest(*this, step, manifest); !problem.empty()) return problem;
  for (const auto& file : manifest.files) {
    std::string problem = check_file(final_path(step), file);
    if (!problem.empty()) return problem;
  }
  return unlisted_in(final_path(step), manifest);
}

std::string CheckpointDir::unlisted_file(int64_t step) const {
  CheckpointManifest manifest;
  if (std::string problem = read_manifest(*this, step, manifest); !problem.empty()) return problem;
  return unlisted_in(final_path(step), manifest);
}


std::string CheckpointDir::verify_file(int64_t step, const std::string& name) const {
  CheckpointManifest manifest;
  if (std::string problem = read_manifest(*this, step, manifest); !problem.empty()) return problem;
  for (const auto& file : manifest.files)
    if (file.name == name) return check_file(final_path(step), file);
  return final_path(step) + "/manifest.json does not list " + name;
}

std::vector<std::string> CheckpointDir::remove_partials() const {
  std::vector<std::string> removed;
  std::error_code error;
  if (!fs::is_directory(root_, error)) return removed;
  for (const auto& entry : fs::directory_iterator(root_, error)) {
    const std::string name = entry.path().filename().string();
    if (step_of(name, kPartialPrefix)) {
      fs::remove_all(entry.path(), error);
      removed.push_back(name);
    }
  }
  return removed;
}

std::string CheckpointDir::set_aside_complete(const std::string& folder_name) const {
  const std::vector<int64_t> steps = complete_steps();
  if (steps.empty()) return {};
  std::error_code error;
  // Two runs set aside within a second get -2, -3, ...
  fs::path aside = fs::path(root_) / folder_name;
  for (int suffix = 2; fs::exists(aside, error) && suffix <= 100; ++suffix)
    aside = fs::path(root_) / (folder_name + "-" + std::to_string(suffix));
  if (fs::exists(aside, error) || !fs::create_directory(aside, error))
    throw CheckpointError("cannot set the earlier checkpoints aside into " + aside.string() + ": " +
                          (error ? error.message() : "it exists"));
  for (const int64_t step : steps) {
    fs::rename(final_path(step), aside / fs::path(final_path(step)).filename(), error);
    if (error) throw CheckpointError("cannot move " + final_path(step) + " into " + aside.string() + ": " + error.message());
  }
  return aside.string();
}

std::vector<int64_t> CheckpointDir::rotate(int keep_last, int64_t max_bytes) const {
  std::vector<int64_t> steps = complete_steps();
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (int64_t step : steps) {
    int64_t bytes = 0;
    try {
      bytes = manifest(step).total_bytes();
    } catch (const CheckpointError&) {
    }
    sizes.push_back(bytes);
    total += bytes;
  }
  std::vector<int64_t> deleted;
  size_t first = 0;
  while (steps.size() - first > 1) {
    const bool too_many = keep_last > 0 && static_cast<int64_t>(steps.size() - first) > keep_last;
    const bool too_big = max_bytes > 0 && total > max_bytes;
    if (!too_many && !too_big) break;
    std::error_code error;
    fs::remove_all(final_path(steps[first]), error);
    deleted.push_back(steps[first]);
    total -= sizes[first];
    ++first;
  }
  return deleted;
}

std::optional<int64_t> CheckpointDir::choose(const std::string& policy, std::vector<std::string>& warnings) const {
  if (policy == "never") return std::nullopt;
  if (policy != "auto" && policy != "require")
    throw CheckpointError("unknown checkpoint.load policy \"" + policy + "\": auto, require or never");
  std::vector<int64_t> steps = complete_steps();
  for (auto step = steps.rbegin(); step != steps.rend(); ++step) {
    const std::string problem = verify(*step);
    if (problem.empty()) return *step;
    warnings.push_back("checkpoint " + final_path(*step) + " fails verification (" + problem +
                       "); trying the one before");
  }
  if (policy == "require")
    throw CheckpointError("checkpoint.load = \"require\" but " + root_ + " holds no complete checkpoint" +
                          (steps.empty() ? "" : " that verifies"));
  return std::nullopt;
}

void write_file_atomically(const std::string& file, const std::string& text) {
  const fs::path path(file);
  const fs::path temporary = path.string() + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw CheckpointError("cannot write " + temporary.string() + ": " + std::strerror(errno));
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      throw CheckpointError("cannot write " + temporary.string() + ": " + std::strerror(errno));
    }
    written += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced) throw CheckpointError("fsync of " + temporary.string() + " failed: " + std::strerror(errno));
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) throw CheckpointError("cannot rename " + temporary.string() + ": " + error.message());
}


std::optional<std::pair<std::string, int64_t>> as_checkpoint(const std::string& path) {
  const std::filesystem::path dir(path);
  const std::string name = dir.filename().string();
  const std::string prefix = "global_step_";
  std::error_code error;
  if (name.rfind(prefix, 0) != 0 || !std::filesystem::is_regular_file(dir / "manifest.json", error))
    return std::nullopt;
  try {
    return std::make_pair(dir.parent_path().string(), std::stoll(name.substr(prefix.size())));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool path_is_within(const std::string& inner, const std::string& outer) {
  std::error_code ec;
  const fs::path a = fs::weakly_canonical(fs::absolute(inner, ec), ec).lexically_normal();
  const fs::path b = fs::weakly_canonical(fs::absolute(outer, ec), ec).lexically_normal();
  auto ai = a.begin();
  for (auto bi = b.begin(); bi != b.end(); ++bi, ++ai) {
    if (bi->empty()) continue;  // a trailing separator
    if (ai == a.end() || *ai != *bi) return false;
  }
  return true;
}

}  // namespace meshrun
