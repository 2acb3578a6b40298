// The meshrun subcommands. Each returns the process exit code:
// 0 ok, 1 invalid recipe or failed run, 2 usage error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "meshrun/lint/lint.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace CLI {
class App;
}

namespace meshrun::cli {

enum ExitCode { kOk = 0, kFailed = 1, kUsage = 2 };

struct CommonOptions {
  std::vector<std::string> sets;  // --set section.key=value
  std::vector<Override> overrides() const;
};

// Lints the recipe for a command that acts on it, printing its diagnostics to
// stderr. Returns false, after saying that `nothing` ("nothing was started")
// happened, when the recipe is invalid or could not be planned.
bool lint_for_command(const std::string& recipe_path, const CommonOptions& common, const char* nothing,
                      LintReport& report);

int lint_command(const std::vector<std::string>& recipes, const CommonOptions& common,
                 const std::string& format);
// `meshrun plan --ray [--address URL]`.
struct RayPlanOptions {
  bool check = false;
  std::string address;
};
int plan_command(const std::string& recipe, const CommonOptions& common, const std::string& cluster,
                 const std::string& format, const RayPlanOptions& ray = {});
int run_command(const std::string& recipe, const CommonOptions& common);
int docs_command(const std::string& topic);
struct SubmitOptions {
  bool slurm = false;
  bool ray = false;
  bool now = false;
  std::string script;  // empty: NAME.sbatch (NAME.ray.sh with --ray) in the working directory
  std::string partition, account, time;  // --slurm
  std::string address;                   // --ray: empty: launch.address, else RAY_ADDRESS
  std::string python = "python3";        // --ray
};

int check_command(const std::string& recipe, const CommonOptions& common);
int submit_command(const std::string& recipe, const CommonOptions& common, const SubmitOptions& submit);
int env_command(const std::string& recipe, const CommonOptions& common, const std::string& format);
struct TokenizeOptions {
  std::string model;  // model directory, tokenizer file, builtin:bytes or a builtin: preset
  std::optional<std::string> text, decode, chat;
  bool no_special = false;
  bool generation_prompt = false;  // --chat: add_generation_prompt
  bool render = false;             // --chat: print the text, not the ids
};
int tokenize_command(const TokenizeOptions& options);
// data_command.cpp: the first samples of a recipe's data as the run sees them.
inline constexpr int kMaxDataSamples = 1000;
struct DataOptions {
  std::string recipe;
  CommonOptions common;
  int samples = 3;               // 1..kMaxDataSamples
  bool eval = false;             // data.eval_path instead of data.path
  std::string format = "text";  // text | json
};
int data_command(const DataOptions& options);
struct ReportOptions {
  std::string run_dir;  // a run's logging.dir
  std::string out;      // empty: RUN_DIR/report.html
};
int report_command(const ReportOptions& options);
// completion.cpp: the bash completion script for `app`.
std::string bash_completion(const CLI::App& app);
struct GenerateOptions {
  std::string model;      // Hugging Face style directory or a builtin: preset
  std::string tokenizer;  // empty: the model directory's
  std::string adapter;    // a PEFT LoRA directory merged into the model; empty: none
  std::optional<std::string> prompt, prompts_file;
  std::string input_key = "prompt";  // of --prompts lines (or "messages")
  bool chat = false;                 // --prompt through the chat template
  int64_t max_new_tokens = 64;
  int max_prompt_len = 4096;
  double temperature = 0;
  double top_p = 1;
  int top_k = -1;
  uint64_t seed = 0;
  int64_t batch = 16;  // sequences per forward (the KV cache's batch)
  int64_t num_samples = 1;  // samples per prompt, sharing its prefill (each its own random stream)
  std::string dtype = "fp32";
  std::string device = "cpu";
  bool eager = false;  // no CUDA graphs for the decode steps
  std::string format = "text";  // text | jsonl
};
int generate_command(const GenerateOptions& options);
int ckpt_inspect_command(const std::string& path);

struct CkptConvertOptions {
  std::string checkpoint;  // a global_step_N folder, or a [checkpoint] path (its newest that verifies)
  std::string output;      // the Hugging Face directory to write
  std::string role = "actor";
  std::string dtype;  // fp32 | bf16 | fp16; empty: the role's training dtype
};
int ckpt_convert_command(const CkptConvertOptions& options);

// `meshrun RECIPE ...` means `meshrun run RECIPE ...`: inserts "run" before
// the first positional argument when it is not a subcommand.
std::vector<std::string> with_default_subcommand(std::vector<std::string> args,
                                                 const std::vector<std::string>& subcommands,
                                                 const std::vector<std::string>& options_with_values);

// A mistyped subcommand: when the first positional argument is no
// subcommand, no existing path and nothing like a file name (no '.' or
// '/'), that argument and the subcommand nearest to it, if any is near.
std::optional<std::pair<std::string, std::string>> mistyped_subcommand(const std::vector<std::string>& args,
                                               const std::vector<std::string>& subcommands,
                                               const std::vector<std::string>& options_with_values);

}  // namespace meshrun::cli
