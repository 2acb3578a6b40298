// Internal to lint: the probes of what a recipe's paths name on this machine
// (src/lint/path_lint.cpp), the checks of their rows in lint_rules().
#pragma once

#include "meshrun/recipe/diagnostics.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun::lint_detail {

// data.tokenizer: the tokenizer the data is rendered with loads.
void check_tokenizer_source(const Recipe& recipe, Diagnostics& diagnostics);
// data.path: the dataset and evaluation files a path names exist.
void check_data_paths(const Recipe& recipe, Diagnostics& diagnostics);
// plan.output-folder: the folders the run writes into can be folders and are writable.
void check_output_folders(const Recipe& recipe, Diagnostics& diagnostics);

}  // namespace meshrun::lint_detail
