// manifest.json of a checkpoint (include/meshrun/ckpt/checkpoint.hpp).
#include <nlohmann/json.hpp>

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
  CheckpointManifest manifest;
  try {
    const auto json = nlohmann::json::parse(text);
    manifest.format_version = json.at("format_version").get<int>();
    if (manifest.format_version != kFormatVersion)
      throw CheckpointError(where + ": format_version " + std::to_string(manifest.format_version) +
                            " is not the " + std::to_string(kFormatVersion) + " this build reads");
    manifest.global_step = json.at("global_step").get<int64_t>();
    manifest.algorithm = json.at("algorithm").get<std::string>();
    manifest.recipe_hash = json.at("recipe_hash").get<std::string>();
    manifest.layout = json.at("layout").get<std::string>();
    for (const auto& file : json.at("files"))
      manifest.files.push_back({file.at("name").get<std::string>(), file.at("bytes").get<int64_t>(),
                                file.at("xxh3").get<std::string>()});
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointError(where + ": not a meshrun checkpoint manifest (" + error.what() + ")");
  }
  return manifest;
}

}  // namespace meshrun
