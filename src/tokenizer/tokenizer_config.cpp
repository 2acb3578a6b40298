// Files a tokenizer is read from: the file itself, and a model directory's
// tokenizer_config.json (chat template, bos/eos/pad tokens, add_bos_token)
// and chat_template.jinja.
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tokenizer_internal.hpp"
#include "meshrun/bounded_json.hpp"

namespace meshrun::tokenizer_detail {
namespace {

using json = nlohmann::json;

// bos_token and friends are a string, null, or an AddedToken object.
std::optional<std::string> token_text(const json& config, const char* key, const std::string& path) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw TokenizerError(path + ": " + key + " is neither a string nor {\"content\": ...}");
}

std::optional<std::string> chat_template(const json& config, const std::string& path) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {  // named templates: the "default" one
    for (const json& entry : *it)
      if (entry.is_object() && entry.value("name", "") == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
    throw TokenizerError(path + ": chat_template is a list without a \"default\" template");
  }
  throw TokenizerError(path + ": chat_template is neither a string nor a list of named templates");
}

std::optional<bool> flag(const json& config, const char* key, const std::string& path) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) throw TokenizerError(path + ": " + key + " is not true or false");
  return it->get<bool>();
}

}  // namespace

std::string read_file(const std::filesystem::path& path, const char* what, std::size_t max_bytes) {
  BoundedText read = read_bounded(path.string(), max_bytes);
  if (!read.ok()) throw TokenizerError(std::string(what) + " at " + path.string() + ": " + read.problem(max_bytes));
  return std::move(read.text);
}

// transformers (4.47 on) saves the chat template to chat_template.jinja
// beside tokenizer_config.json and, loading, prefers that file to the
// config's own chat_template: models saved since ship it that way.
void read_chat_template_file(const std::filesystem::path& directory, TokenizerConfig& config) {
  const std::filesystem::path path = directory / "chat_template.jinja";
  if (!path_present(path.string())) return;
  config.chat_template = read_file(path, "chat_template.jinja", kMaxTokenizerConfigBytes);
  config.chat_template_origin = "chat_template.jinja at " + path.string();
}

TokenizerConfig read_tokenizer_config(const std::filesystem::path& directory) {
  TokenizerConfig config;
  const std::filesystem::path path = directory / "tokenizer_config.json";
  if (!path_present(path.string())) {
    read_chat_template_file(directory, config);
    return config;
  }
  config.path = "tokenizer_config.json at " + path.string();
  json root;
  try {
    root = parse_bounded_json(read_file(path, "tokenizer_config.json", kMaxTokenizerConfigBytes));
  } catch (const json::parse_error& parse_error) {
    throw TokenizerError(config.path + ": not valid JSON: " + parse_error.what());
  }
  if (!root.is_object()) throw TokenizerError(config.path + ": not a JSON object");
  config.chat_template = chat_template(root, config.path);
  config.bos_token = token_text(root, "bos_token", config.path);
  config.eos_token = token_text(root, "eos_token", config.path);
  config.pad_token = token_text(root, "pad_token", config.path);
  config.add_bos_token = flag(root, "add_bos_token", config.path);
  config.add_eos_token = flag(root, "add_eos_token", config.path);
  if (config.chat_template) config.chat_template_origin = config.path;
  read_chat_template_file(directory, config);
  return config;
}

}  // namespace meshrun::tokenizer_detail
