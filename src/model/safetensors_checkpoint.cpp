// A model directory's weights: one file or the shards of an index. The index
// is checked against the shards when opened, so that a missing or misplaced
// tensor is reported with the file the index promised it in.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "meshrun/bounded_json.hpp"
#include "meshrun/model/safetensors.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

json read_index(const std::string& path) {
  // An index names each tensor once: a few MB even for the largest models.
  constexpr std::size_t kMaxBytes = std::size_t{64} << 20;
  const BoundedText read = read_bounded(path, kMaxBytes);
  if (!read.ok()) throw SafetensorsError(path + ": " + read.problem(kMaxBytes));
  const std::string& contents = read.text;
  json index = parse_bounded_json(contents, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) throw SafetensorsError(path + ": not a JSON object");
  auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object()) throw SafetensorsError(path + ": no \"weight_map\" object");
  return *map;
}

}  // namespace

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& path) : path_(path) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    files_.push_back(std::make_unique<SafetensorsFile>(path));
  } else if (fs::is_directory(path, ec)) {
    const fs::path directory(path);
    if (fs::exists(directory / kIndexFile, ec)) {
      const std::string index_path = (directory / kIndexFile).string();
      const json weight_map = read_index(index_path);
      std::map<std::string, size_t> file_index;
      for (const auto& [name, file] : weight_map.items()) {
        if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
          throw SafetensorsError(index_path + ": tensor \"" + name + "\" maps to " + json_excerpt(file) +
                                 ", not a file name in the directory");
        const std::string file_name = file.get<std::string>();
        auto [it, inserted] = file_index.emplace(file_name, files_.size());
        if (inserted) files_.push_back(std::make_unique<SafetensorsFile>((directory / file_name).string()));
        if (!files_[it->second]->find(name))
          throw SafetensorsError(index_path + ": tensor \"" + name + "\" is not in " + files_[it->second]->path() +
                                 " where the index puts it");
        file_of_[name] = it->second;
      }
      return;
    }
    if (!fs::exists(directory / kSingleFile, ec))
      throw SafetensorsError(path + ": no " + kSingleFile + " or " + kIndexFile);
    files_.push_back(std::make_unique<SafetensorsFile>((directory / kSingleFile).string()));
  } else {
    throw SafetensorsError(path + ": no such file or directory");
  }
  for (const auto& entry : files_[0]->entries()) file_of_[entry.name] = 0;
}

std::vector<std::string> SafetensorsCheckpoint::names() const {
  std::vector<std::string> names;
  for (const auto& [name, file] : file_of_) names.push_back(name);
  return names;
}

const SafetensorsFile& SafetensorsCheckpoint::file_for(const std::string& name) const {
  auto it = file_of_.find(name);
  if (it == file_of_.end()) throw SafetensorsError(path_ + ": missing tensor \"" + name + "\"");
  return *files_[it->second];
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const {
  return *file_for(name).find(name);
}

torch::Tensor SafetensorsCheckpoint::load(const std::string& name, std::optional<torch::Dtype> dtype) const {
  return file_for(name).load(name, dtype);
}

torch::Tensor SafetensorsCheckpoint::load_slice(const std::string& name, int64_t dim, int64_t start, int64_t length,
                                                std::optional<torch::Dtype> dtype) const {
  return file_for(name).load_slice(name, dim, start, length, dtype);
}

}  // namespace meshrun
