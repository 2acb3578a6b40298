// `meshrun submit RECIPE --slurm [--now]`: writes a batch script whose nodes,
// tasks and GPUs per node come from the plan, running `srun meshrun run
// RECIPE`; with --now, submits it with sbatch.
// `meshrun submit RECIPE --ray [--address URL] [--now]`: checks that the Ray
// cluster can hold the plan's bundles (nothing is written or submitted when
// it cannot), writes the `ray job submit` script, and with --now becomes
// that command (exec), following the job's log to its end.
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "meshrun/error.hpp"
#include "meshrun/launch/launcher.hpp"
#include "meshrun/launch/ray.hpp"
#include "meshrun/lint/lint.hpp"
#include "src/cli/engine_path.hpp"

namespace meshrun::cli {
namespace {

// A recipe name may hold spaces or '/'; a file name of it may not.
std::string file_name_for(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' ? c : '_';
  return out.empty() ? "job" : out;
}

// ray_job.py beside the binary (a build folder) or where an install puts it.
std::string ray_entrypoint_path() {
  const std::filesystem::path folder = std::filesystem::path(this_executable_path()).parent_path();
  const std::filesystem::path candidates[] = {folder / kRayJobName,
                                              (folder / kRayJobFromBinDir / kRayJobName).lexically_normal()};
  for (const auto& candidate : candidates)
    if (std::filesystem::is_regular_file(candidate)) return candidate.string();
  throw LaunchError("the Ray job's entrypoint is neither " + candidates[0].string() + " nor " +
                    candidates[1].string() + ": reinstall meshrun");
}

int submit_to_ray(const LintReport& report, const std::string& recipe_path, const CommonOptions& common,
                  const SubmitOptions& submit) {
  const Recipe& recipe = *report.recipe;
  std::vector<std::string> command;
  std::string script_path = submit.script.empty() ? file_name_for(recipe.name) + ".ray.sh" : submit.script;
  try {
    RayJobOptions options;
    options.entrypoint = ray_entrypoint_path();  // what is wrong here comes before asking the cluster
    options.address = resolve_ray_address(submit.address, recipe, ProcessEnvironment());
    // Refused before anything is written or started: a placement group
    // that can never be placed would wait out its timeout on the cluster.
    const RayFit fit = fit_on_ray_cluster(report.plan->cluster, options.address);
    if (!fit.fits) {
      spdlog::error("{}; nothing was submitted", fit.text);
      return kFailed;
    }
    spdlog::info("{}", fit.text);
    options.meshrun_binary = this_executable_path();
    options.recipe_path = std::filesystem::absolute(recipe_path).lexically_normal().string();
    options.python = submit.python;
    options.working_directory = std::filesystem::current_path().string();
    options.sets = common.sets;
    options.log_level = spdlog::level::to_string_view(spdlog::get_level()).data();
    write_sbatch_script(script_path, make_ray_submit_script(recipe, *report.plan, options));
    command = make_ray_submit_command(recipe, *report.plan, options);
  } catch (const std::exception& error) {
    spdlog::error("{}", describe_failure(error, &recipe));
    return kFailed;
  }
  std::printf("wrote %s\n", script_path.c_str());
  if (!submit.now) return kOk;
  std::fflush(stdout);
  std::vector<char*> argv;
  for (auto& word : command) argv.push_back(word.data());
  argv.push_back(nullptr);
  ::execvp("ray", argv.data());
  spdlog::error("cannot run `ray job submit` ({}): install Ray's command line (pip install 'ray[default]') here, or "
                "run {} where it is",
                std::strerror(errno), script_path);
  return kFailed;
}

}  // namespace

int submit_command(const std::string& recipe_path, const CommonOptions& common, const SubmitOptions& submit) {
  LintReport report;
  if (!lint_for_command(recipe_path, common, "nothing was written", report)) return kFailed;
  if (submit.ray) return submit_to_ray(report, recipe_path, common, submit);
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
