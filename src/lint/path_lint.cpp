// Lint of what the recipe's paths name on this machine
// (include/meshrun/lint/lint.hpp): the dataset files, the tokenizer source,
// the folders the run writes into. These probe the filesystem, so they live
// here rather than among recipe/'s pure rules; their rows (data.path,
// data.tokenizer, plan.output-folder) are lint's (lint_rules.cpp).
#include <filesystem>
#include <unistd.h>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/lint/lint.hpp"
#include "meshrun/recipe/schema.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "probes.hpp"

namespace meshrun {

namespace {

namespace fs = std::filesystem;

std::string in_quotes(const std::string& text) { return "\"" + text + "\""; }

// Why a path that should name a file does not: missing, a folder, or
// something else (a pipe, a device, a dangling link).
std::string not_a_file(const std::string& path) {
  std::error_code ec;
  if (!path_present(path)) return "does not exist";
  if (fs::is_directory(path, ec)) return "is a folder, not a file";
  if (!fs::exists(path, ec)) return "is a link to nothing";
  return "is not a regular file (a pipe or device)";
}

}  // namespace

namespace lint_detail {

// A dataset or evaluation file the recipe names by a path's form must be
// there (a hub dataset name is the run's to resolve).
void check_data_paths(const Recipe& recipe, Diagnostics& diagnostics) {
  std::error_code ec;
  const std::string& path = recipe.data.path;
  if (!path.empty() && looks_like_path(path) && !fs::is_regular_file(path, ec))
    diagnostics.error(recipe.where("data.path"), "data.path", "dataset file " + in_quotes(path) + " " + not_a_file(path));
  const std::string& eval = recipe.data.eval_path;
  if (path.empty() || eval.empty() || !row_of(recipe.algorithm).evaluates) return;  // the rules' errors
  if (looks_like_path(eval) && !fs::is_regular_file(eval, ec))
    diagnostics.error(recipe.where("data.eval_path"), "data.path",
                      "evaluation file " + in_quotes(eval) + " " + not_a_file(eval));
}

// Why the tokenizer found at `source` would not load (a kind meshrun does
// not read, a malformed file, a chat template that does not parse), or
// empty: what the run would otherwise meet only once its workers start.
std::string tokenizer_load_problem(const std::string& source) {
  try {
    load_tokenizer(source);
    return {};
  } catch (const std::exception& error) {
    return error.what();
  }
}

// The tokenizer the run's data is rendered with must be there: data.tokenizer
// by the loader's own resolution (a path, a hub name in the local cache, a
// builtin: name), else the actor's model when it is a folder on disk (one
// that is missing or unbuildable is plan.model's to report).
void check_tokenizer_source(const Recipe& recipe, Diagnostics& diagnostics) {
  const std::string& tokenizer = recipe.data.tokenizer;
  if (!tokenizer.empty()) {
    const std::string problem = tokenizer_source_problem(tokenizer);
    if (!problem.empty())
      diagnostics.error(recipe.where("data.tokenizer"), "data.tokenizer", problem,
                        "name a model folder (tokenizer.json or tokenizer.model), a tokenizer file, a model in the "
                        "local Hugging Face cache, or builtin:bytes");
    else if (const std::string load = tokenizer_load_problem(tokenizer); !load.empty())
      diagnostics.error(recipe.where("data.tokenizer"), "data.tokenizer", "the tokenizer does not load: " + load,
                        "use a byte-level BPE tokenizer.json or a SentencePiece tokenizer.model (docs/training.md)");
    return;
  }
  const RoleConfig* actor = recipe.role(Role::actor);
  if (!actor || actor->model.empty()) return;
  std::error_code ec;
  if (!fs::is_directory(actor->model, ec)) return;
  const std::string problem = tokenizer_source_problem(actor->model);
  if (!problem.empty())
    diagnostics.error(recipe.where("roles.actor.model"), "data.tokenizer",
                      "the data is tokenized with the actor's model, but " + problem,
                      "copy the base model's tokenizer files into it, or set [data] tokenizer");
  else if (const std::string load = tokenizer_load_problem(actor->model); !load.empty())
    diagnostics.error(recipe.where("roles.actor.model"), "data.tokenizer",
                      "the data is tokenized with the actor's model, whose tokenizer does not load: " + load,
                      "set [data] tokenizer to one that loads (a byte-level BPE tokenizer.json or a SentencePiece "
                      "tokenizer.model)");
}

// The final model and the logs go beside the checkpoints, never among them:
// a file written into a sealed checkpoint folder fails its manifest, and a
// resume with checkpoint.load = "auto" then starts over.
void check_outputs_apart_from_checkpoints(const Recipe& recipe, Diagnostics& diagnostics) {
  const std::string& checkpoints = recipe.checkpoint.path;
  if (checkpoints.empty()) return;
  for (const auto& [key, value] :
       {std::pair<const char*, const std::string*>{"checkpoint.output", &recipe.checkpoint.output},
        {"logging.dir", &recipe.logging.dir}}) {
    if (value->empty() || !path_is_within(*value, checkpoints)) continue;
    diagnostics.error(recipe.where(key), "plan.output-folder",
                      key + std::string(" ") + in_quotes(*value) + " is checkpoint.path " + in_quotes(checkpoints) +
                          " or inside it: what it writes would land among the checkpoints (in a sealed one, files "
                          "its manifest does not list, and the checkpoint no longer verifies)",
                      "name a folder beside checkpoint.path (the recipes use <run>/model and <run> for "
                      "<run>/checkpoints)");
  }
}

// Folders the run writes into: a file where a folder (or a folder's
// parent) belongs, or an unwritable folder, would fail the run only at
// its first save, after hours of training. The nearest existing ancestor
// decides, since the run creates the rest.
void check_output_folders(const Recipe& recipe, Diagnostics& diagnostics) {
  for (const auto& [key, value] :
       {std::pair<const char*, const std::string*>{"checkpoint.path", &recipe.checkpoint.path},
        {"checkpoint.output", &recipe.checkpoint.output},
        {"logging.dir", &recipe.logging.dir}}) {
    if (value->empty() || !recipe.is_set(key)) continue;
    fs::path folder = fs::path(*value).lexically_normal();
    std::error_code ec;
    // Each step drops a component, so the walk ends at the root or at "".
    while (!folder.empty() && !fs::exists(folder, ec) && folder.has_relative_path()) folder = folder.parent_path();
    if (folder.empty()) folder = ".";
    if (!fs::exists(folder, ec)) continue;  // unreadable: the run reports it
    if (!fs::is_directory(folder, ec)) {
      diagnostics.error(recipe.where(key), "plan.output-folder",
                        key + std::string(" ") + in_quotes(*value) + " needs a folder, but " +
                            in_quotes(folder.string()) + " is a file",
                        "name a folder, or remove the file");
    } else if (access(folder.c_str(), W_OK | X_OK) != 0) {
      diagnostics.error(recipe.where(key), "plan.output-folder",
                        key + std::string(" ") + in_quotes(*value) + ": the folder " + in_quotes(folder.string()) +
                            " is not writable",
                        "name a folder this user may write to");
    }
  }
  check_outputs_apart_from_checkpoints(recipe, diagnostics);
}

}  // namespace lint_detail

void check_recipe_paths(const Recipe& recipe, Diagnostics& diagnostics) {
  lint_detail::check_tokenizer_source(recipe, diagnostics);
  lint_detail::check_data_paths(recipe, diagnostics);
  lint_detail::check_output_folders(recipe, diagnostics);
}

}  // namespace meshrun
