// The run shell (meshrun/train/run_shell.hpp).
#include "meshrun/train/run_shell.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

#include "meshrun/ckpt/checkpoint.hpp"

#include "meshrun/metrics/console.hpp"
#include "meshrun/metrics/tensorboard.hpp"
#include "meshrun/train/train_threads.hpp"

namespace meshrun::train_detail {

std::string duration_text(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return "?";
  const auto total = static_cast<long long>(std::llround(seconds));
  const long long hours = total / 3600, minutes = total / 60 % 60, rest = total % 60;
  if (hours > 0) return fmt::format("{}h{:02}m", hours, minutes);
  if (minutes > 0) return fmt::format("{}m{:02}s", minutes, rest);
  return fmt::format("{}s", rest);
}

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The shell's own part of trainer_state.json.
nlohmann::json shell_state(const RunSummary& summary) {
  return {{"first", summary.first}, {"last", summary.last}};
}

nlohmann::json recipe_state(const RunPlan& run) {
  nlohmann::json keys = nlohmann::json::object();
  for (const ResolvedKey& key : run.recipe_keys) keys[key.key] = key.value;
  return {{"fingerprint", run.recipe_fingerprint}, {"keys", std::move(keys)}};
}

// log_dir/resolved.toml for this run; one left by a run under another
// recipe is kept as resolved-<its fingerprint>.toml.
void write_resolved_recipe(const RunPlan& run) {
  namespace fs = std::filesystem;
  const fs::path dir(run.log_dir), path = dir / "resolved.toml";
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) throw CheckpointError("cannot create " + dir.string() + ": " + error.message());
  std::ifstream in(path, std::ios::binary);
  if (in) {
    std::ostringstream old;
    old << in.rdbuf();
    const std::string text = old.str();
    if (text == run.resolved_toml) return;
    const std::string marker = "# Fingerprint: ";
    const size_t at = text.find(marker);
    const std::string fingerprint =
        at == std::string::npos ? "earlier" : text.substr(at + marker.size(), text.find('\n', at) - at - marker.size());
    fs::rename(path, dir / ("resolved-" + fingerprint + ".toml"), error);
    if (error) throw CheckpointError("cannot keep the earlier " + path.string() + ": " + error.message());
  }
  write_file_atomically(path.string(), run.resolved_toml);
}

// A resume under a recipe whose resolved keys differ from the checkpoint's.
void warn_recipe_changes(const RunPlan& run, const nlohmann::json& trainer, int64_t step) {
  const auto recorded = trainer.find("recipe");
  if (recorded == trainer.end() || !recorded->is_object()) return;  // written before recipes were recorded
  if (recorded->value("fingerprint", std::string()) == run.recipe_fingerprint) return;
  std::vector<ResolvedKey> before;
  const auto keys = recorded->find("keys");
  if (keys != recorded->end() && keys->is_object())
    for (auto it = keys->begin(); it != keys->end(); ++it)
      if (it.value().is_string()) before.push_back({it.key(), it.value().get<std::string>()});
  const std::vector<KeyChange> changes = diff_resolved(before, run.recipe_keys);
  if (changes.empty()) return;
  constexpr size_t kShown = 20;
  std::string list;
  for (size_t i = 0; i < changes.size() && i < kShown; ++i)
    list += fmt::format("\n  {}: {} -> {}", changes[i].key, changes[i].before, changes[i].after);
  if (changes.size() > kShown) list += fmt::format("\n  ... and {} more", changes.size() - kShown);
  spdlog::warn("resuming from the checkpoint of step {} under a different recipe: {} key(s) differ from the one "
               "that wrote it:{}",
               step, changes.size(), list);
}

void finish_outcome(StepOutcome& outcome) {
  if (!outcome.finish) return;
  auto finish = std::move(outcome.finish);
  outcome.finish = nullptr;
  finish(outcome);
}

}  // namespace

RunSummary run_shell(RunAlgorithm& algorithm, const RunPlan& run, Group& world, const Clock& clock) {
  RunSummary summary;
  summary.algorithm = run.algorithm;
  summary.headline = std::string(algorithm.headline());
  const int64_t total = capped_steps(algorithm.setup(), run);
  summary.planned_steps = total;
  const bool writes = world.rank() == 0;

  if (writes && !run.resolved_toml.empty()) write_resolved_recipe(run);
  TrainingCheckpointer checkpointer(run, world, algorithm.layout());
  int64_t first_step = 1;
  if (std::optional<ResumePoint> point = checkpointer.resume()) {
    try {
      if (writes) warn_recipe_changes(run, point->trainer, point->step);
      algorithm.restore(*point);
      const nlohmann::json shell = point->trainer.value("run", nlohmann::json::object());
      summary.first = shell.value("first", 0.0);
      summary.last = shell.value("last", 0.0);
    } catch (const nlohmann::json::exception& error) {
      // A field the algorithm reads without a named check: the file, at least.
      throw CheckpointError(point->trainer_file + ": " + error.what());
    }
    first_step = point->step + 1;
    summary.steps = point->step;
  }
  const std::string metrics_path = (std::filesystem::path(run.log_dir) / "metrics.jsonl").string();
  if (writes) MetricsWriter::keep_steps_up_to(metrics_path, first_step - 1);
  MetricsWriter metrics(run.log_dir, writes);
  TensorBoardWriter tensorboard(run.log_dir, writes && run.tensorboard);
  if (first_step > 1) tensorboard.restart_at(first_step);  // TensorBoard drops the stale steps, as metrics.jsonl did
  const auto write_row = [&](MetricsRecord& record) {
    record.set("time", unix_seconds());
    metrics.write(record);
    tensorboard.write(record);
  };

  int64_t saved = first_step - 1;  // the step of the newest checkpoint (or where this run started)
  const auto save = [&](int64_t step) {
    CheckpointContent content = algorithm.checkpoint(step);
    content.trainer["step"] = step;
    content.trainer["run"] = shell_state(summary);
    content.trainer["recipe"] = recipe_state(run);
    checkpointer.save(step, content.state, content.trainer, content.write_extra);
    saved = step;
  };
  const double started = clock.now_seconds();
  std::optional<StepOutcome> unwritten;  // the last step when the cadence skipped its row
  int64_t evaluated_step = 0;               // the newest step the evaluation set was scored after
  for (int64_t step = first_step; step <= total; ++step) {
    std::optional<StepOutcome> outcome = algorithm.step(step, total);
    if (!outcome) {
      summary.data_exhausted = true;
      if (writes)
        spdlog::warn("{}: the data ran out after step {} of {}", run.algorithm, step - 1, total);
      break;
    }
    // Between steps, where no parallel region runs: the team follows the
    // CPUs other processes leave this one (train_threads.hpp).
    if (const int threads = adapt_training_threads(); threads > 0) outcome->record.set("cpu/threads", threads);
    summary.steps = step;
    const bool last = step == total;
    const bool evaluated = run.evaluates_after(step, last);
    const bool logged = run.logs_after(step, last) || evaluated;
    // A step's device figures are read only where they are needed: its
    // row, the summary's first and last headline, a checkpoint's.
    if (step == 1 || logged || run.saves_after(step, last)) {  // logged covers the last step
      finish_outcome(*outcome);
      if (step == 1) summary.first = outcome->headline;
      summary.last = outcome->headline;
    }
    if (evaluated) {
      algorithm.evaluate(outcome->record);
      evaluated_step = step;
    }
    if (logged) {
      write_row(outcome->record);
      unwritten.reset();
      if (writes) {
        const double elapsed = clock.now_seconds() - started;
        const double per_step = elapsed / static_cast<double>(step - first_step + 1);
        // Position and time first: a terminal cuts the line at its width.
        show_progress(fmt::format("{} step {}/{} | {} elapsed, ETA {} | {}", run.algorithm, step, total,
                                  duration_text(elapsed), duration_text(per_step * static_cast<double>(total - step)),
                                  outcome->console));
      }
    } else {
      unwritten = std::move(*outcome);
    }
    // After the metrics row: a checkpoint of step k implies its metrics.
    if (run.saves_after(step, last)) save(step);
    checkpointer.poll();
  }
  // The data ended before the planned last step: the evaluation owed after
  // the last step is taken after the last step done (into its row, or a
  // row of its own when that one is written already).
  if (summary.data_exhausted && run.evaluates && summary.steps >= first_step && evaluated_step != summary.steps) {
    MetricsRecord record(summary.steps);
    if (unwritten) {
      finish_outcome(*unwritten);
      summary.last = unwritten->headline;
      record = std::move(unwritten->record);
    }
    unwritten.reset();
    algorithm.evaluate(record);
    write_row(record);
  }
  if (summary.data_exhausted && summary.steps > saved) {
    if (unwritten) {
      finish_outcome(*unwritten);
      summary.last = unwritten->headline;
      write_row(unwritten->record);
    }
    save(summary.steps);
  }
  checkpointer.finish();
  algorithm.write_output(run.output);
  summary.output_dir = run.output;
  summary.metrics_path = metrics.path();
  return summary;
}

}  // namespace meshrun::train_detail
