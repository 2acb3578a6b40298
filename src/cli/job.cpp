#include "job.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <spdlog/spdlog.h>
#include <thread>

#include "commands.hpp"
#include "meshrun/error.hpp"
#include "meshrun/launch/launcher.hpp"
#include "meshrun/metrics/console.hpp"

namespace meshrun::cli {
namespace {

constexpr const char* kLoopback = "127.0.0.1";
constexpr const char* kFailureRecordVariable = "MESHRUN_FAILURE_RECORD";

// Restarting replays what a checkpoint resumes exactly: these kinds fail again.
bool restart_repeats(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::config:
    case ErrorKind::data:
    case ErrorKind::hook:
    case ErrorKind::model: return true;
    case ErrorKind::io:
    case ErrorKind::dist:
    case ErrorKind::internal: return false;
  }
  return false;
}

// A private folder for one job's failure records, removed with it.
class FailureRecords {
 public:
  FailureRecords() {
    std::string pattern = (std::filesystem::temp_directory_path() / "meshrun-failures-XXXXXX").string();
    if (::mkdtemp(pattern.data())) folder_ = pattern;  // without it, restarts happen as before
  }
  ~FailureRecords() {
    std::error_code error;
    if (!folder_.empty()) std::filesystem::remove_all(folder_, error);
  }
  FailureRecords(const FailureRecords&) = delete;
  FailureRecords& operator=(const FailureRecords&) = delete;

  const std::string& folder() const { return folder_; }

  // "rank 1" for the first rank whose failure a restart would repeat, else
  // empty; the records are cleared for the next attempt.
  std::string repeating_failure(int workers) {
    std::string found;
    for (int rank = 0; rank < workers && !folder_.empty(); ++rank) {
      const std::filesystem::path record = std::filesystem::path(folder_) / ("rank-" + std::to_string(rank));
      std::ifstream in(record);
      std::string kind;
      if (!(in >> std::setw(16) >> kind)) continue;  // one short word, never more
      in.close();
      std::error_code error;
      std::filesystem::remove(record, error);
      if (found.empty() && kind == "repeats") found = "rank " + std::to_string(rank);
    }
    return found;
  }

 private:
  std::string folder_;
};

// One attempt: the workers on a free loopback port, supervised to the end.
LocalLaunchResult launch_workers(const Recipe& recipe, const std::vector<std::string>& worker_args,
                                 const std::string& failure_records) {
  const int workers = recipe.launch.procs_per_node;
  int port = recipe.launch.master_port;
  if (!port_is_free(kLoopback, port)) {
    int chosen = choose_free_port(kLoopback);
    spdlog::info("master port {} is taken; using {}", port, chosen);
    port = chosen;
  }
  LocalLaunchOptions options;
  options.workers = workers;
  options.show_all_ranks = spdlog::should_log(spdlog::level::debug);
  // On a terminal the workers' progress lines are drawn in place here.
  const bool relay = configured_console_mode() == ConsoleMode::terminal;
  if (relay) options.terminal = &stderr_terminal();
  const std::string executable = this_executable_path();
  options.command_for = [&](int rank) {
    WorkerCommand command;
    command.argv.push_back(executable);
    command.argv.insert(command.argv.end(), worker_args.begin(), worker_args.end());
    command.environment = local_worker_environment_for(rank, rank, workers, workers, 0, kLoopback, port);
    command.environment[kConsoleVariable] = relay ? "relay" : "plain";
    if (!failure_records.empty()) command.environment[kFailureRecordVariable] = failure_records;
    return command;
  };
  spdlog::info("starting {} local workers (master {}:{})", workers, kLoopback, port);
  return run_local_workers(options);
}

// [launch] max_restarts: after a failed attempt (not an interruption by
// SIGINT/SIGTERM, nor a failure a restart would repeat), the whole group
// starts again after restart_delay seconds; the trainers resume from the
// newest checkpoint.
int spawn_local_workers(const Recipe& recipe, const std::vector<std::string>& worker_args) {
  FailureRecords records;
  for (int attempt = 0;; ++attempt) {
    LocalLaunchResult result = launch_workers(recipe, worker_args, records.folder());
    if (result.exit_code == 0) return 0;
    spdlog::error("{}", result.failure);
    const bool interrupted = result.exit_code > 128;
    if (interrupted || attempt >= recipe.launch.max_restarts) return result.exit_code;
    const std::string repeating = records.repeating_failure(recipe.launch.procs_per_node);
    if (!repeating.empty()) {
      spdlog::error("not restarting ([launch] max_restarts = {}): {} failed in a way a restart from the checkpoint "
                    "would repeat (the recipe, the data, a hook or the model); mend it and run again",
                    recipe.launch.max_restarts, repeating);
      return result.exit_code;
    }
    spdlog::warn("restarting the workers in {:g} s (restart {} of {}); training resumes from the newest checkpoint "
                 "in {}",
                 recipe.launch.restart_delay, attempt + 1, recipe.launch.max_restarts, recipe.checkpoint.path);
    std::this_thread::sleep_for(std::chrono::duration<double>(recipe.launch.restart_delay));
  }
}

}  // namespace

bool launcher_restarts_workers(const LaunchInfo& launch) {
  return launch.launcher == "local" || launch.launcher == "ray";
}

void record_worker_failure(const LaunchInfo& launch, const std::exception& error) {
  const char* folder = std::getenv(kFailureRecordVariable);
  // The launchers that restart read the records to decide on a restart.
  if (!folder || !*folder || !launcher_restarts_workers(launch)) return;
  const auto* meshrun_error = dynamic_cast<const Error*>(&error);
  if (!meshrun_error || !restart_repeats(meshrun_error->kind())) return;
  std::ofstream(std::filesystem::path(folder) / ("rank-" + std::to_string(launch.rank))) << "repeats\n";
}

std::vector<std::string> worker_arguments(const std::string& subcommand, const std::string& recipe,
                                          const std::vector<std::string>& sets) {
  std::vector<std::string> args = {"--log-level", spdlog::level::to_string_view(spdlog::get_level()).data(),
                                   subcommand, recipe};
  for (const auto& set : sets) {
    args.push_back("--set");
    args.push_back(set);
  }
  return args;
}

int run_as_job(const LintReport& report, const std::vector<std::string>& worker_args,
               const std::function<int(const LaunchInfo&)>& work) {
  const Recipe& recipe = *report.recipe;
  const LaunchConfig& launch = recipe.launch;
  const int world_size = launch.nodes * launch.procs_per_node;
  ProcessEnvironment environment;
  const bool local_type = launch.type == "local" || launch.type == "auto";
  // Alone (no launcher, or a SLURM allocation's batch script, an srun or
  // mpirun of one task), a one-node recipe of several processes gets them
  // from the local launcher; its workers are marked, and ignore the rest.
  if (local_type && world_size > 1 && launch.nodes == 1 && alone_under_launcher(environment))
    return spawn_local_workers(recipe, worker_args);
  try {
    LaunchInfo info = detect_launch(environment, launch, world_size, recipe.where("launch.nodes").str());
    if (info.needs_mpi_bootstrap) complete_mpi_bootstrap(info);
    return work(info);
  } catch (const LaunchEnvError& error) {
    spdlog::error("{}", error.what());
    if (launch.nodes > 1 && present_launcher(environment) == "single")
      spdlog::error("a {}-node job needs a launcher: run it under srun, mpirun or torchrun, or write a batch "
                    "script with `meshrun submit {} --slurm`",
                    launch.nodes, recipe.file);
    return kFailed;
  }
}

}  // namespace meshrun::cli
