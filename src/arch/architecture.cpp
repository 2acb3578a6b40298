// Architecture resolution: a role's `model` is a preset, a local model
// directory (its config.json is authoritative), or a public name we know the
// shape of. The directory wins over the table so that a fine-tuned copy with a
// changed vocabulary is planned as it really is.
#include <filesystem>

#include "architecture_table.hpp"
#include "meshrun/arch/architecture.hpp"
#include "meshrun/arch/hub_cache.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

std::string known_names_text() {
  std::string text;
  for (const auto& name : known_architecture_names()) {
    if (!text.empty()) text += ", ";
    text += name;
  }
  return text;
}

}  // namespace

std::vector<std::string> known_architecture_names() {
  return arch_detail::builtin_architecture_names();
}

std::optional<Architecture> architecture_from_config_json(const std::string& path,
                                                          std::string& error) {
  Architecture a;
  try {
    static_cast<ModelConfig&>(a) = read_model_config(path);
  } catch (const ModelConfigError& e) {
    error = e.what();
    return std::nullopt;
  }
  fs::path directory = fs::path(path).parent_path();
  a.name = directory.filename().string();
  if (a.name.empty()) a.name = directory.string();
  a.source = "config.json at " + path;
  return a;
}

std::optional<Architecture> resolve_architecture(const std::string& model, std::string& error) {
  if (model.empty()) {
    error = "no model given";
    return std::nullopt;
  }
  if (model.rfind(arch_detail::kPresetPrefix, 0) == 0) {
    if (auto preset = arch_detail::builtin_preset(model)) return preset;
    error = "unknown preset \"" + model + "\" (known: " + known_names_text() + ")";
    return std::nullopt;
  }

  std::error_code ec;
  if (fs::is_directory(model, ec)) {
    fs::path config = fs::path(model) / "config.json";
    if (!fs::is_regular_file(config, ec)) {
      error = "model directory " + model + " has no readable config.json";
      return std::nullopt;
    }
    return architecture_from_config_json(config.string(), error);
  }
  if (fs::is_regular_file(model, ec)) return architecture_from_config_json(model, error);

  // A hub name: its config.json in the local Hugging Face cache, else the
  // built-in table (a plan needs no weights; the run will).
  const SourceResolution hub = resolve_source(model, HubRepoType::model);
  if (hub.from_hub) {
    const fs::path config = fs::path(hub.path) / "config.json";
    auto found = architecture_from_config_json(config.string(), error);
    if (found) found->source = "Hugging Face cache: " + config.string();
    return found;
  }
  if (auto known = arch_detail::builtin_public_architecture(model)) {
    if (parse_hub_name(model)) known->source += "; not in the local Hugging Face cache";
    return known;
  }
  error = "unknown model \"" + model +
          "\": not a local directory with config.json, a built-in preset, a known public model " +
          "(known: " + known_names_text() + ")" + (hub.error.empty() ? std::string() : ", or in the cache: " + hub.error);
  return std::nullopt;
}

}  // namespace meshrun
