// The run shell with a counting algorithm in a world of one: logging and
// save cadence, the console's durations, resume after a crash continuing
// the same numbers and metrics rows, data that runs out before the planned
// steps (logged, checkpointed, and a resume that ends at once), max_steps,
// and the resume policy "never".
#include "tests/dist/torch_doctest.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshrun/plan/plan.hpp"
#include "meshrun/train/run_shell.hpp"
#include "support/temp_dir.hpp"
#include "tests/dist/world_of_one.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;
using train_detail::CheckpointContent;
using train_detail::ResumePoint;
using train_detail::StepOutcome;

// Its state is a running sum of the step numbers (a tensor, in the rank
// file) and how many data batches it has drawn (the trainer JSON); the
// data gives `available` batches.
class Counting final : public train_detail::RunAlgorithm {
 public:
  Counting(int64_t planned, int64_t available) : planned_(planned), available_(available) {}

  std::string_view headline() const override { return "sum"; }
  int64_t setup() override {
    calls.push_back("setup");
    return planned_;
  }
  std::string layout() const override { return "world 1; counting"; }
  void restore(const ResumePoint& point) override {
    calls.push_back("restore " + std::to_string(point.step));
    sum_ = point.tensors.at("counting/sum").item<double>();
    drawn_ = point.trainer.at("drawn").get<int64_t>();
  }
  std::optional<StepOutcome> step(int64_t step, int64_t total) override {
    if (step == fail_at) throw std::runtime_error("crash at step " + std::to_string(step));
    if (drawn_ >= available_) return std::nullopt;
    ++drawn_;
    sum_ += static_cast<double>(step);
    calls.push_back("step " + std::to_string(step) + "/" + std::to_string(total));
    StepOutcome out;
    out.record = MetricsRecord(step);
    const double sum = sum_;
    const auto fill = [this, sum, step](StepOutcome& outcome) {
      if (deferred) calls.push_back("read " + std::to_string(step));
      outcome.record.set("sum", sum);
      outcome.headline = sum;
      outcome.console = "sum " + std::to_string(sum);
    };
    if (deferred)
      out.finish = fill;  // as a device-decided step: read when the shell asks
    else
      fill(out);
    return out;
  }
  CheckpointContent checkpoint(int64_t step) override {
    calls.push_back("checkpoint " + std::to_string(step));
    CheckpointContent content;
    content.state.tensors["counting/sum"] = torch::tensor({sum_}, torch::kFloat64).reshape({});
    content.trainer["drawn"] = drawn_;
    return content;
  }
  void write_output(const std::string& directory) override { calls.push_back("output " + directory); }
  void evaluate(MetricsRecord& record) override {
    calls.push_back("evaluate " + std::to_string(drawn_));
    record.set("eval_sum", sum_);
  }

  std::vector<std::string> calls;
  int64_t fail_at = -1;
  bool deferred = false;  // the step's figures come by StepOutcome::finish

 private:
  int64_t planned_, available_;
  int64_t drawn_ = 0;
  double sum_ = 0;
};

RunPlan run_in(const fs::path& folder) {
  RunPlan run;
  run.recipe_file = (folder / "recipe.toml").string();
  run.algorithm = "counting";
  run.checkpoint_path = (folder / "checkpoints").string();
  run.keep_last = 10;
  run.output = (folder / "output").string();
  run.log_dir = (folder / "logs").string();
  return run;
}

std::vector<nlohmann::json> metric_rows(const RunPlan& run) {
  std::ifstream in(fs::path(run.log_dir) / "metrics.jsonl");
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

std::vector<int64_t> steps_of(const std::vector<nlohmann::json>& rows) {
  std::vector<int64_t> steps;
  for (const auto& row : rows) steps.push_back(row.at("step").get<int64_t>());
  return steps;
}

}  // namespace

TEST_CASE("the shell logs and saves at their cadences and after the last step, then writes the output") {
  test::TempDir temp;
  auto runtime = test::world_of_one();
  RunPlan run = run_in(temp.path());
  run.log_every = 2;
  run.save_every = 2;
  run.tensorboard = true;
  Counting counting(5, 100);
  const RunSummary summary = train_detail::run_shell(counting, run, runtime->world());
  CHECK(summary.steps == 5);
  CHECK(summary.planned_steps == 5);
  CHECK_FALSE(summary.data_exhausted);
  CHECK(summary.headline == "sum");
  CHECK(summary.first == 1);
  CHECK(summary.last == 15);
  CHECK(summary.output_dir == run.output);
  CHECK(steps_of(metric_rows(run)) == std::vector<int64_t>{2, 4, 5});
  for (const auto& row : metric_rows(run)) CHECK(row.at("time").get<double>() > 1.7e9);  // Unix seconds
  int event_files = 0;
  for (const auto& entry : fs::directory_iterator(run.log_dir))
    event_files += entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  CHECK(event_files == 1);
  CHECK(CheckpointDir(run.checkpoint_path).complete_steps() == std::vector<int64_t>{2, 4, 5});
  CHECK(counting.calls == std::vector<std::string>{"setup", "step 1/5", "step 2/5", "checkpoint 2", "step 3/5",
                                                   "step 4/5", "checkpoint 4", "step 5/5", "checkpoint 5",
                                                   "output " + run.output});
  runtime->shutdown();
}

TEST_CASE("after a crash the shell resumes from the newest checkpoint with the same numbers and rows") {
  test::TempDir temp;
  auto runtime = test::world_of_one();
  RunPlan run = run_in(temp.path());
  run.save_every = 2;
  {
    Counting crashing(6, 100);
    crashing.fail_at = 4;  // steps 1-3 logged, checkpoint at 2
    CHECK_THROWS_WITH_AS(train_detail::run_shell(crashing, run, runtime->world()), "crash at step 4",
                         std::runtime_error);
  }
  CHECK(steps_of(metric_rows(run)) == std::vector<int64_t>{1, 2, 3});
  Counting resumed(6, 100);
  const RunSummary summary = train_detail::run_shell(resumed, run, runtime->world());
  CHECK(resumed.calls.at(1) == "restore 2");
  CHECK(resumed.calls.at(2) == "step 3/6");
  CHECK(summary.first == 1);   // from the checkpoint: step 1 ran before the crash
  CHECK(summary.last == 21);   // 1 + ... + 6, as without the crash
  const auto rows = metric_rows(run);
  CHECK(steps_of(rows) == std::vector<int64_t>{1, 2, 3, 4, 5, 6});  // step 3's crashed row was cut
  CHECK(rows.at(2).at("sum") == 6);
  runtime->shutdown();
}

TEST_CASE("a step's deferred figures are read only for the rows, checkpoints, first and last step that need them") {
  test::TempDir temp;
  auto runtime = test::world_of_one();
  RunPlan run = run_in(temp.path());
  run.log_every = 3;
  run.save_every = 5;
  Counting counting(7, 100);
  counting.deferred = true;
  const RunSummary summary = train_detail::run_shell(counting, run, runtime->world());
  CHECK(summary.first == 1);
  CHECK(summary.last == 28);
  CHECK(steps_of(metric_rows(run)) == std::vector<int64_t>{3, 6, 7});
  for (const auto& row : metric_rows(run)) CHECK(row.contains("sum"));
  std::vector<std::string> reads;
  for (const auto& call : counting.calls)
    if (call.rfind("read ", 0) == 0) reads.push_back(call);
  CHECK(reads == std::vector<std::string>{"read 1", "read 3", "read 5", "read 6", "read 7"});
  // The checkpoint of step 5 carries the summary read at step 5.
  Counting again(7, 100);
  again.deferred = true;
  RunPlan more = run;
  const RunSummary resumed = train_detail::run_shell(again, more, runtime->world());
  CHECK(resumed.last == 28);

  // Data that ends between rows: the last step done is read when its row is written.
  test::TempDir other;
  RunPlan short_run = run_in(other.path());
  short_run.log_every = 3;
  Counting short_data(7, 5);
  short_data.deferred = true;
  const RunSummary ended = train_detail::run_shell(short_data, short_run, runtime->world());
  CHECK(ended.data_exhausted);
  CHECK(ended.last == 15);
  CHECK(steps_of(metric_rows(short_run)) == std::vector<int64_t>{3, 5});
  CHECK(metric_rows(short_run).back().at("sum").get<double>() == 15);
  runtime->shutdown();
}

TEST_CASE("data that runs out early: the last step done is logged and checkpointed, and a resume ends at once") {
  test::TempDir temp;
  auto runtime = test::world_of_one();
  RunPlan run = run_in(temp.path());
  run.log_every = 2;
  Counting short_data(5, 3);
  const RunSummary summary = train_detail::run_shell(short_data, run, runtime->world());
  CHECK(summary.data_exhausted);
  CHECK(summary.steps == 3);
  CHECK(summary.planned_steps == 5);
  CHECK(summary.last == 6);
  CHECK(steps_of(metric_rows(run)) == std::vector<int64_t>{2, 3});
  CHECK(CheckpointDir(run.checkpoint_path).complete_steps() == std::vector<int64_t>{3});
  CHECK(short_data.calls.back() == "output " + run.output);

  Counting again(5, 3);
  const RunSummary resumed = train_detail::run_shell(again, run, runtime->world());
  CHECK(again.calls == std::vector<std::string>{"setup", "restore 3", "output " + run.output});
  CHECK(resumed.steps == 3);
  CHECK(resumed.last == 6);
  CHECK(CheckpointDir(run.checkpoint_path).complete_steps() == std::vector<int64_t>{3});
  runtime->shutdown();
}

TEST_CASE("data that runs out early still gets the final evaluation, after the last step done") {
  test::TempDir temp;
  auto runtime = test::world_of_one();
  RunPlan run = run_in(temp.path());
  run.evaluates = true;
  run.eval_every = 2;
  run.log_every = 2;
  {
    // Step 3's row was skipped by the cadence: the evaluation goes into it.
    Counting short_data(6, 3);
    train_detail::run_shell(short_data, run, runtime->world());
    CHECK(short_data.calls == std::vector<std::string>{"setup", "step 1/6", "step 2/6", "evaluate 2", "step 3/6",
                                                       "evaluate 3", "checkpoint 3", "output " + run.output});
    const auto rows = metric_rows(run);
    CHECK(steps_of(rows) == std::vector<int64_t>{2, 3});
    CHECK(rows.at(1).at("eval_sum") == 6);
    CHECK(rows.at(1).at("sum") == 6);
  }
  // Every step logged, evaluated every 2 steps, the data giving `available`.
  const auto run_logging_every_step = [&](const fs::path& folder, int64_t available) {
    RunPlan logged = run_in(folder);
    logged.evaluates = true;
    logged.eval_every = 2;
    Counting counting(6, available);
    train_detail::run_shell(counting, logged, runtime->world());
    return std::make_pair(counting.calls, metric_rows(logged));
  };
  {
    // Step 4's row was written (evaluated on the cadence): nothing is owed.
    test::TempDir other;
    const auto [calls, rows] = run_logging_every_step(other.path(), 4);
    CHECK(std::count(calls.begin(), calls.end(), "evaluate 4") == 1);
    CHECK(steps_of(rows) == std::vector<int64_t>{1, 2, 3, 4});
  }
  {
    // Step 3's row was written without an evaluation: a row of its own.
    test::TempDir third;
    const auto rows = run_logging_every_step(third.path(), 3).second;
    CHECK(steps_of(rows) == std::vector<int64_t>{1, 2, 3, 3});
    CHECK_FALSE(rows.at(2).contains("eval_sum"));
    CHECK(rows.at(3).at("eval_sum") == 6);
  }
  runtime->shutdown();
}

TEST_CASE("max_steps caps the planned steps, and resume \"never\" starts over") {
  test::TempDir temp;
  auto runtime = test::world_of_one();
  RunPlan run = run_in(temp.path());
  run.max_steps = 3;
  Counting capped(10, 100);
  CHECK(train_detail::run_shell(capped, run, runtime->world()).steps == 3);
  CHECK(CheckpointDir(run.checkpoint_path).complete_steps() == std::vector<int64_t>{3});
  run.resume = ResumePolicy::never;
  Counting fresh(10, 100);
  const RunSummary summary = train_detail::run_shell(fresh, run, runtime->world());
  CHECK(fresh.calls.at(1) == "step 1/3");
  CHECK(summary.last == 6);
  CHECK(steps_of(metric_rows(run)) == std::vector<int64_t>{1, 2, 3});  // the old rows were cut back to step 0
  runtime->shutdown();
}

TEST_CASE("the console's durations") {
  CHECK(train_detail::duration_text(7.4) == "7s");
  CHECK(train_detail::duration_text(65) == "1m05s");
  CHECK(train_detail::duration_text(7380) == "2h03m");
  CHECK(train_detail::duration_text(-1) == "?");
}

}  // namespace meshrun
