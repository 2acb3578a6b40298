// manifest.json of a checkpoint (include/meshrun/ckpt/checkpoint.hpp).
#include <limits>

#include <nlohmann/json.hpp>

#include "json_integer.hpp"
#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun {

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
    const auto json = nlohmann::json::parse(text);
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
      manifest.files.push_back({file.at("name").get<std::string>(), bytes, file.at("xxh3").get<std::string>()});
    }
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointError(where + ": not a meshrun checkpoint manifest (" + error.what() + ")");
  }
  return manifest;
}

}  // namespace meshrun
