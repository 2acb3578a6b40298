// manifest.json of a checkpoint (include/meshrun/ckpt/checkpoint.hpp).
#include <algorithm>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "json_integer.hpp"
#include "meshrun/bounded_json.hpp"
#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun {
namespace {

// "rank-0.bin", "hf/actor/model.safetensors"; not "/etc/x", "../x", "a//b", "".
bool is_name_inside(const std::string& name) {
  if (name.empty() || name.front() == '/' || name.find('\0') != std::string::npos) return false;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t end = std::min(name.find('/', start), name.size());
    const std::string_view part(name.data() + start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

}  // namespace

int64_t CheckpointManifest::total_bytes() const {
  int64_t total = 0;
  for (const auto& file : files) total += file.bytes;
  return total;
}

std::string CheckpointManifest::to_json() const {
  nlohmann::json out = {{"format_version", format_version}, {"global_step", global_step},
                        {"algorithm", algorithm},           {"recipe_hash", recipe_hash},
                        {"layout", layout},                 {"files", nlohmann::json::array()}};
  for (const auto& file : files) out["files"].push_back({{"name", file.name}, {"bytes", file.bytes}, {"xxh3", file.xxh3}});
  return out.dump(2) + "\n";
}

CheckpointManifest CheckpointManifest::from_json(const std::string& text, const std::string& where) {
  using ckpt_detail::integer_at;
  CheckpointManifest manifest;
  try {
    const auto json = parse_bounded_json(text);
    manifest.format_version = integer_at<int>(json, "format_version", where + ": ");
    if (manifest.format_version != kFormatVersion)
      throw CheckpointError(where + ": format_version " + std::to_string(manifest.format_version) +
                            " is not the " + std::to_string(kFormatVersion) + " this build reads");
    manifest.global_step = integer_at<int64_t>(json, "global_step", where + ": ");
    manifest.algorithm = json.at("algorithm").get<std::string>();
    manifest.recipe_hash = json.at("recipe_hash").get<std::string>();
    manifest.layout = json.at("layout").get<std::string>();
    int64_t total = 0;  // total_bytes() must not overflow
    for (const auto& file : json.at("files")) {
      const std::string what = where + ": files[" + std::to_string(manifest.files.size()) + "].";
      const int64_t bytes = integer_at<int64_t>(file, "bytes", what);
      if (bytes < 0 || bytes > std::numeric_limits<int64_t>::max() - total)
        throw CheckpointError(what + "bytes " + std::to_string(bytes) +
                              (bytes < 0 ? " is negative" : " makes the files total more than 2^63 bytes"));
      total += bytes;
      std::string name = file.at("name").get<std::string>();
      // Verification and loading open every listed file inside the
      // checkpoint: a name must never lead out of it.
      if (!is_name_inside(name))
        throw CheckpointError(what + "name \"" + name +
                              "\" is not a relative path inside the checkpoint (absolute, empty, or with ..)");
      manifest.files.push_back({std::move(name), bytes, file.at("xxh3").get<std::string>()});
    }
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointError(where + ": not a meshrun checkpoint manifest (" + error.what() + ")");
  }
  return manifest;
}

}  // namespace meshrun
