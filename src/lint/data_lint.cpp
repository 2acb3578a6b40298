// Lint of the recipe's data file (include/meshrun/lint/lint.hpp): the loaders'
// own checks (read_sft_records, read_prompt_records) over a bounded prefix,
// their DataError turned into located diagnostics.
#include <filesystem>

#include "meshrun/data/dataset.hpp"
#include "meshrun/lint/lint.hpp"
#include "meshrun/arch/hub_cache.hpp"
#include "meshrun/data/preference.hpp"
#include "meshrun/data/prompts.hpp"

namespace meshrun {

namespace {

// One file of the recipe's data: `data` is recipe.data with its path set
// to the file, named by `key` in the recipe.
void check_one_data_file(const Recipe& recipe, const DataConfig& data, const std::string& key,
                         Diagnostics& diagnostics, long long max_bytes) {
  const SourceResolution resolved = resolve_data_file(data.path);
  const std::string& path = resolved.path;
  if (resolved.from_hub)
    diagnostics.add({Severity::note, recipe.where(key), "data.line",
                     "the dataset " + data.path + " is " + path + " in the local Hugging Face cache", ""});
  std::error_code ec;
  if (path.empty() || !std::filesystem::is_regular_file(path, ec)) return;
  bool truncated = false;
  const DataReadLimit limit{max_bytes, &truncated};
  try {
    switch (row_of(recipe.algorithm).data) {
      case DataShape::prompt_response:
        read_sft_records(data, kDefaultMaxDataErrors, limit);
        break;
      case DataShape::prompt:
        read_prompt_records(data, kDefaultMaxDataErrors, limit);
        break;
      case DataShape::preference:
        read_preference_records(data, kDefaultMaxDataErrors, limit);
        break;
    }
  } catch (const DataError& error) {
    for (const DataProblem& problem : error.problems()) {
      const std::string message = (problem.key.empty() ? "" : "key \"" + problem.key + "\": ") + problem.message;
      diagnostics.error(SourceLocation{problem.file, static_cast<int>(problem.line), 0}, "data.line", message);
    }
    const long long rest = error.total() - static_cast<long long>(error.problems().size());
    if (rest > 0)
      diagnostics.error(SourceLocation{path, 0, 0}, "data.line",
                        std::to_string(rest) + " more bad " + (rest == 1 ? "line" : "lines") + " not shown");
  }
  if (truncated)
    diagnostics.add({Severity::note, recipe.where(key), "data.line",
                     "checked the first " + std::to_string(max_bytes >> 20) + " MiB of " + path +
                         "; the rest is checked when the run reads it",
                     ""});
}

}  // namespace

void check_data_file(const Recipe& recipe, Diagnostics& diagnostics, long long max_bytes) {
  check_one_data_file(recipe, recipe.data, "data.path", diagnostics, max_bytes);
  // The evaluation set is read the same way, only later in the run.
  if (recipe.data.eval_path.empty() || !row_of(recipe.algorithm).evaluates) return;
  DataConfig eval = recipe.data;
  eval.path = recipe.data.eval_path;
  check_one_data_file(recipe, eval, "data.eval_path", diagnostics, max_bytes);
}

}  // namespace meshrun
