// `meshrun submit RECIPE --slurm [--now]`: writes a batch script whose nodes,
// tasks and GPUs per node come from the plan, running `srun meshrun run
// RECIPE`; with --now, submits it with sbatch.
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "meshrun/error.hpp"
#include "meshrun/launch/launcher.hpp"
#include "meshrun/lint/lint.hpp"

namespace meshrun::cli {
namespace {

// A recipe name may hold spaces or '/'; a file name of it may not.
std::string file_name_for(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '_';
  return out.empty() ? "job" : out;
}

}  // namespace

int submit_command(const std::string& recipe_path, const CommonOptions& common, const SubmitOptions& submit) {
  LintReport report;
  if (!lint_for_command(recipe_path, common, "nothing was written", report)) return kFailed;
  SbatchOptions options;
  options.meshrun_binary = this_executable_path();
  options.recipe_path = std::filesystem::absolute(recipe_path).lexically_normal().string();
  options.sets = common.sets;
  if (!submit.partition.empty()) options.partition = submit.partition;
  if (!submit.account.empty()) options.account = submit.account;
  if (!submit.time.empty()) options.time = submit.time;
  std::string script_path = submit.script.empty() ? file_name_for(report.recipe->name) + ".sbatch" : submit.script;
  try {
    write_sbatch_script(script_path, make_sbatch_script(*report.recipe, *report.plan, options));
  } catch (const std::exception& error) {
    spdlog::error("{}", describe_failure(error, &*report.recipe));
    return kFailed;
  }
  std::printf("wrote %s\n", script_path.c_str());
  if (!submit.now) return kOk;
  SbatchSubmission submission = submit_sbatch(script_path);
  std::fputs(submission.output.c_str(), stdout);
  if (!submission.error.empty()) {
    spdlog::error("sbatch {}: {}", script_path, submission.error);
    return kFailed;
  }
  if (!submission.job_id.empty()) std::printf("submitted job %s\n", submission.job_id.c_str());
  return kOk;
}

}  // namespace meshrun::cli
