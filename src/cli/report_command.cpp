// `meshrun report RUN_DIR [--out FILE]`: RUN_DIR/report.html, one
// self-contained page about a run (report.hpp). RUN_DIR is
// the run's logging.dir: metrics.jsonl, and resolved.toml from which the
// plan and the checkpoint folder are found again. A folder that is not a
// run, or a metrics file that cannot be read, is an error naming it (exit 1).
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "commands.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/lint/lint.hpp"
#include "report.hpp"

namespace meshrun::cli {
namespace {

namespace fs = std::filesystem;

// A resolved.toml is a few kilobytes; anything far larger is not one.
constexpr std::uintmax_t kMaxResolvedBytes = 4u << 20;

std::string read_small_file(const fs::path& path) {
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) throw ReportError(path.string() + ": cannot be read: " + error.message());
  if (size > kMaxResolvedBytes)
    throw ReportError(path.string() + ": " + std::to_string(size) + " bytes is too large for a resolved recipe");
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw ReportError(path.string() + ": cannot be read");
  return text.str();
}

std::string local_time_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

void add_recipe_parts(const fs::path& resolved, ReportInput& input) {
  input.resolved_toml = read_small_file(resolved);
  LintReport lint = lint_recipe(resolved.string(), {});
  if (lint.recipe) {
    input.algorithm = std::string(name_of(lint.recipe->algorithm));
    input.checkpoint_dir = lint.recipe->checkpoint.path;
  }
  if (lint.plan) input.plan_text = format_plan_text(*lint.plan);
  if (lint.diagnostics.has_errors())
    input.plan_note = "meshrun lint of resolved.toml today reports:\n" + lint.diagnostics.format();
}

void add_checkpoints(ReportInput& input) {
  std::error_code error;
  if (input.checkpoint_dir.empty() || !fs::is_directory(input.checkpoint_dir, error)) return;
  const CheckpointDir dir(input.checkpoint_dir);
  for (const int64_t step : dir.complete_steps()) {
    ReportCheckpoint checkpoint{step, dir.final_path(step), 0, ""};
    try {
      const CheckpointManifest manifest = dir.manifest(step);
      checkpoint.bytes = manifest.total_bytes();
      checkpoint.layout = manifest.layout;
    } catch (const CheckpointError& problem) {
      checkpoint.layout = std::string("manifest unreadable: ") + problem.what();
    }
    input.checkpoints.push_back(std::move(checkpoint));
  }
  for (const auto& entry : fs::directory_iterator(input.checkpoint_dir, error))
    if (entry.path().filename().string().rfind(".partial-global_step_", 0) == 0)
      input.partial_checkpoints.push_back(entry.path().string());
}

}  // namespace

int report_command(const ReportOptions& options) {
  try {
    const fs::path run_dir = fs::absolute(options.run_dir).lexically_normal();
    std::error_code error;
    if (!fs::exists(run_dir, error)) throw ReportError(options.run_dir + ": no such folder");
    if (!fs::is_directory(run_dir, error)) throw ReportError(options.run_dir + ": not a folder (a run's logging.dir)");
    const fs::path metrics = run_dir / "metrics.jsonl";
    if (!fs::exists(metrics, error))
      throw ReportError(options.run_dir + ": no metrics.jsonl (is it a run's logging.dir?)");
    if (!fs::is_regular_file(metrics, error)) throw ReportError(metrics.string() + ": not a regular file");

    ReportInput input;
    input.run_dir = run_dir.string();
    input.rows = read_metrics_rows(metrics.string());
    if (fs::is_regular_file(run_dir / "resolved.toml", error)) add_recipe_parts(run_dir / "resolved.toml", input);
    add_checkpoints(input);
    input.generated_at = local_time_now();

    const std::string out = options.out.empty() ? (run_dir / "report.html").string() : options.out;
    try {
      write_file_atomically(out, report_html(input));
    } catch (const CheckpointError& problem) {
      throw ReportError(problem.what());
    }
    std::fprintf(stdout, "%s\n", out.c_str());
    return kOk;
  } catch (const ReportError& problem) {
    std::fprintf(stderr, "meshrun report: %s\n", problem.what());
    return kFailed;
  }
}

}  // namespace meshrun::cli
