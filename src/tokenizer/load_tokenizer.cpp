// load_tokenizer: which kind of tokenizer a `source` string names.
#include <algorithm>

#include "meshrun/model/hub_cache.hpp"
#include "meshrun/plan/architecture.hpp"
#include "tokenizer_internal.hpp"

namespace meshrun {

namespace fs = std::filesystem;
using namespace tokenizer_detail;

namespace {

std::unique_ptr<Tokenizer> load_file(const fs::path& file) {
  const TokenizerConfig config = read_tokenizer_config(file.parent_path().empty() ? fs::path(".") : file.parent_path());
  if (file.extension() == ".json") return load_hf_tokenizer_json(file, config);
  return load_sentencepiece_model(file, config);
}

std::unique_ptr<Tokenizer> load_directory(const fs::path& directory) {
  const fs::path json_file = directory / "tokenizer.json", model_file = directory / "tokenizer.model";
  std::error_code error;
  const bool has_model = fs::is_regular_file(model_file, error);
  if (fs::is_regular_file(json_file, error)) {
    const TokenizerConfig config = read_tokenizer_config(directory);
    try {
      return load_hf_tokenizer_json(json_file, config);
    } catch (const UnsupportedTokenizerJson&) {
      if (!has_model) throw;
    }
  }
  if (has_model) return load_sentencepiece_model(model_file, read_tokenizer_config(directory));
  throw TokenizerError("model directory " + directory.string() + " has neither tokenizer.json nor tokenizer.model");
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& source) {
  if (source.rfind("builtin:", 0) == 0) {
    const auto names = known_architecture_names();
    if (source == "builtin:bytes" || std::find(names.begin(), names.end(), source) != names.end())
      return make_byte_tokenizer();
    throw TokenizerError("unknown builtin tokenizer \"" + source + "\" (builtin:bytes or a builtin: model preset)");
  }
  const SourceResolution resolved = resolve_source(source, HubRepoType::model);
  if (!resolved.error.empty()) throw TokenizerError("tokenizer " + source + ": " + resolved.error);
  const fs::path path(resolved.path);
  std::error_code error;
  if (fs::is_directory(path, error)) return load_directory(path);
  if (fs::is_regular_file(path, error)) return load_file(path);
  throw TokenizerError("tokenizer " + source + ": no such file or directory");
}

}  // namespace meshrun
