// load_tokenizer: which kind of tokenizer a `source` string names.
#include <algorithm>

#include "meshrun/arch/hub_cache.hpp"
#include "meshrun/arch/architecture.hpp"
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

// Where a source points, shared by the load and lint's check so that both
// resolve a name the same way.
struct LocatedTokenizer {
  enum class Kind { builtin_bytes, directory, file } kind = Kind::file;
  fs::path path;
  std::string problem;  // non-empty: nothing to load
};

LocatedTokenizer locate_tokenizer(const std::string& source) {
  LocatedTokenizer located;
  if (source.rfind("builtin:", 0) == 0) {
    const auto names = known_architecture_names();
    located.kind = LocatedTokenizer::Kind::builtin_bytes;
    if (source != "builtin:bytes" && std::find(names.begin(), names.end(), source) == names.end())
      located.problem = "unknown builtin tokenizer \"" + source + "\" (builtin:bytes or a builtin: model preset)";
    return located;
  }
  const SourceResolution resolved = resolve_source(source, HubRepoType::model);
  if (!resolved.error.empty()) {
    located.problem = "tokenizer " + source + ": " + resolved.error;
    return located;
  }
  located.path = resolved.path;
  std::error_code error;
  if (fs::is_directory(located.path, error)) {
    located.kind = LocatedTokenizer::Kind::directory;
    if (!fs::is_regular_file(located.path / "tokenizer.json", error) &&
        !fs::is_regular_file(located.path / "tokenizer.model", error))
      located.problem =
          "model directory " + located.path.string() + " has neither tokenizer.json nor tokenizer.model";
    return located;
  }
  if (!fs::is_regular_file(located.path, error)) located.problem = "tokenizer " + source + ": no such file or directory";
  return located;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& source) {
  const LocatedTokenizer located = locate_tokenizer(source);
  if (!located.problem.empty()) throw TokenizerError(located.problem);
  switch (located.kind) {
    case LocatedTokenizer::Kind::builtin_bytes: return make_byte_tokenizer();
    case LocatedTokenizer::Kind::directory: return load_directory(located.path);
    case LocatedTokenizer::Kind::file: return load_file(located.path);
  }
  throw TokenizerError("tokenizer " + source + ": unreachable kind");
}

std::string tokenizer_source_problem(const std::string& source) { return locate_tokenizer(source).problem; }

}  // namespace meshrun
