// bench/startup: how long a meshrun job takes to become usable, and what
// meshrun's collective wrapper costs (issue #3).
//
// 1. Startup. For 2 and 4 local processes, the wall time from launch to the
//    first completed all_reduce: N copies of startup_worker (detect_launch,
//    Runtime::init, one all_reduce on the world group) against N copies of
//    startup_worker.py under the .venv's python (the torch meshrun builds against)
//    (torch.distributed.init_process_group("gloo"), one all_reduce). Both
//    sides are started the same way, by run_local_workers from this process,
//    with torchrun's variables, and time themselves against one start time
//    on CLOCK_MONOTONIC passed in MESHRUN_BENCH_T0_NS. The two sides take
//    turns going first. Optionally `meshrun check RECIPE` end to end.
// 2. Bandwidth. all_reduce of 1 to 256 MiB on 2 processes over loopback
//    through Group::all_reduce and through the bare c10d Gloo group under it,
//    measured by the same workers in the same run (startup_worker
//    --bandwidth).
//
// Prints tables; the figures in docs/benchmarks.md come from this output.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "meshrun/dist/dist.hpp"
#include "meshrun/launch/env.hpp"
#include "meshrun/launch/launcher.hpp"

namespace fs = std::filesystem;

namespace {

constexpr const char* kLoopback = "127.0.0.1";
constexpr const char* kStartVariable = "MESHRUN_BENCH_T0_NS";

std::int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return std::int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

// The key=value numbers of a worker's report line ("startup loaded=0.2 ...").
std::map<std::string, double> fields_of(const std::string& line) {
  std::map<std::string, double> fields;
  std::istringstream words(line);
  std::string word;
  while (words >> word) {
    const auto equals = word.find('=');
    if (equals != std::string::npos) fields[word.substr(0, equals)] = std::stod(word.substr(equals + 1));
  }
  return fields;
}

struct Run {
  double wall = 0;  // launch to every worker exited and reaped
  // rank -> the fields of its line that starts with the requested tag.
  std::map<int, std::map<std::string, double>> reports;
  std::vector<std::map<std::string, double>> rank0_lines;  // every tagged line of rank 0, in order
};

// Starts `workers` processes with run_local_workers (as `meshrun run` does)
// and collects the lines that begin with `tag` (none when it is empty). The
// start time is taken just before the launcher is called and handed to every
// worker. Throws with the workers' stderr when one of them fails.
Run launch(int workers, const std::string& tag, const std::function<meshrun::WorkerCommand(int)>& command_for,
           double timeout_seconds = 300) {
  std::ostringstream out, err;
  std::int64_t start = 0;
  meshrun::LocalLaunchOptions options;
  options.workers = workers;
  options.show_all_ranks = true;
  options.timeout_seconds = timeout_seconds;
  options.out = &out;
  options.err = &err;
  options.command_for = [&](int rank) {
    meshrun::WorkerCommand command = command_for(rank);
    command.environment[kStartVariable] = std::to_string(start);
    return command;
  };
  start = monotonic_ns();
  const meshrun::LocalLaunchResult result = meshrun::run_local_workers(options);
  Run run;
  run.wall = static_cast<double>(monotonic_ns() - start) / 1e9;
  if (result.exit_code != 0)
    throw std::runtime_error(fmt::format("{} ({} workers): {}\n{}{}", command_for(0).argv.front(), workers,
                                         result.failure, err.str(), out.str()));
  static const std::regex line_pattern(R"(^\[rank (\d+)\] (.*)$)");
  std::istringstream lines(out.str());
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (!std::regex_match(line, match, line_pattern)) continue;
    const std::string text = match[2];
    if (tag.empty() || text.rfind(tag + " ", 0) != 0) continue;
    const int rank = std::stoi(match[1]);
    run.reports[rank] = fields_of(text);
    if (rank == 0) run.rank0_lines.push_back(run.reports[rank]);
  }
  return run;
}

struct Paths {
  std::string worker;
  std::string python;
  std::string python_worker;
  std::string meshrun;
  std::string recipe;
};

// ---- 1. startup -----------------------------------------------------------

enum class Side { meshrun, python };

struct StartupSample {
  // The slowest rank's time for each step, since launch: the job has reached
  // a step when every rank has.
  double loaded = 0;   // main() entered / `import torch` done
  double joined = 0;   // Runtime::init / init_process_group returned
  double reduced = 0;  // first all_reduce completed
  double exited = 0;   // every process exited
  // The rendezvous alone: from the last rank loaded to the last rank joined,
  // without process start and library loading.
  double join = 0;
};

StartupSample run_startup(Side side, int workers, const Paths& paths) {
  const int port = meshrun::choose_free_port(kLoopback);
  auto command_for = [&](int rank) {
    meshrun::WorkerCommand command;
    if (side == Side::meshrun) {
      command.argv = {paths.worker};
      command.environment = meshrun::local_worker_environment_for(rank, rank, workers, workers, 0, kLoopback, port);
    } else {
      command.argv = {paths.python, paths.python_worker};
      command.environment = meshrun::torchrun_environment_for(rank, rank, workers, workers, 0, kLoopback, port);
    }
    return command;
  };
  const Run run = launch(workers, "startup", command_for);
  if (static_cast<int>(run.reports.size()) != workers)
    throw std::runtime_error(fmt::format("{} of {} workers reported", run.reports.size(), workers));
  StartupSample sample;
  for (const auto& [rank, fields] : run.reports) {
    sample.loaded = std::max(sample.loaded, fields.at("loaded"));
    sample.joined = std::max(sample.joined, fields.at("joined"));
    sample.reduced = std::max(sample.reduced, fields.at("reduced"));
  }
  sample.exited = run.wall;
  sample.join = sample.joined - sample.loaded;
  return sample;
}

StartupSample median_of(const std::vector<StartupSample>& samples) {
  auto column = [&](double StartupSample::*field) {
    std::vector<double> values;
    for (const auto& sample : samples) values.push_back(sample.*field);
    return median(values);
  };
  return {column(&StartupSample::loaded), column(&StartupSample::joined), column(&StartupSample::reduced),
          column(&StartupSample::exited), column(&StartupSample::join)};
}

// The spread of the headline figure: Python's rendezvous is bimodal (see
// docs/benchmarks.md), so the median alone can hide it.
struct Spread {
  double low = 0, high = 0;
};

Spread reduced_spread(const std::vector<StartupSample>& samples) {
  Spread spread{samples.front().reduced, samples.front().reduced};
  for (const auto& sample : samples) {
    spread.low = std::min(spread.low, sample.reduced);
    spread.high = std::max(spread.high, sample.reduced);
  }
  return spread;
}

struct StartupResult {
  int workers = 0;
  StartupSample meshrun, python;
  Spread meshrun_spread, python_spread;
};

std::vector<StartupResult> bench_startup(const std::vector<int>& worker_counts, int repetitions, const Paths& paths) {
  std::vector<StartupResult> results;
  for (int workers : worker_counts) {
    std::vector<StartupSample> meshrun_samples, python_samples;
    for (int rep = 0; rep < repetitions; ++rep) {
      // Taking turns at going first spreads any warm-cache or page-cache
      // advantage evenly over the two sides.
      const bool meshrun_first = rep % 2 == 0;
      if (meshrun_first) meshrun_samples.push_back(run_startup(Side::meshrun, workers, paths));
      python_samples.push_back(run_startup(Side::python, workers, paths));
      if (!meshrun_first) meshrun_samples.push_back(run_startup(Side::meshrun, workers, paths));
      std::cerr << fmt::format("  startup, {} workers, repetition {}/{}: meshrun {:.3f} s, python {:.3f} s\n",
                               workers, rep + 1, repetitions, meshrun_samples.back().reduced,
                               python_samples.back().reduced);
    }
    results.push_back({workers, median_of(meshrun_samples), median_of(python_samples),
                       reduced_spread(meshrun_samples), reduced_spread(python_samples)});
  }
  return results;
}

void print_startup(const std::vector<StartupResult>& results, int repetitions) {
  std::cout << fmt::format(
      "\nStartup: seconds from launch to each step, slowest rank, median of {} runs per side\n"
      "(loaded: main() entered / `import torch` done; joined: Runtime::init / init_process_group returned;\n"
      " all_reduce: first all_reduce of 4 floats done; exited: every process reaped;\n"
      " join step: last rank loaded to last rank joined, i.e. the rendezvous without process start;\n"
      " all_reduce in: the fastest and slowest of the runs)\n\n",
      repetitions);
  std::cout << fmt::format("{:>7}  {:<20}  {:>8}  {:>8}  {:>10}  {:>8}  {:>13}\n", "workers", "side", "loaded",
                           "joined", "all_reduce", "exited", "all_reduce in");
  for (const auto& result : results) {
    auto row = [&](const char* side, const StartupSample& s, const Spread& spread) {
      std::cout << fmt::format("{:>7}  {:<20}  {:>8.3f}  {:>8.3f}  {:>10.3f}  {:>8.3f}  {:>6.3f}–{:<6.3f}\n",
                               result.workers, side, s.loaded, s.joined, s.reduced, s.exited, spread.low,
                               spread.high);
    };
    row("meshrun", result.meshrun, result.meshrun_spread);
    row("python torch.dist", result.python, result.python_spread);
    const auto& m = result.meshrun;
    const auto& p = result.python;
    std::cout << fmt::format("{:>7}  {:<20}  {:>7.1f}×  {:>7.1f}×  {:>9.1f}×  {:>7.1f}×\n", result.workers,
                             "python / meshrun", p.loaded / m.loaded, p.joined / m.joined, p.reduced / m.reduced,
                             p.exited / m.exited);
    std::cout << fmt::format("{:>7}  {:<20}  join step: meshrun {:.3f} s, python {:.3f} s ({:.1f}×)\n",
                             result.workers, "", m.join, p.join, p.join / m.join);
  }
}

// `meshrun check RECIPE`, end to end: one meshrun process that lints the
// recipe, starts its local workers, which rendezvous, build every group of
// the plan and check collectives on each.
std::optional<double> bench_check(const Paths& paths, int repetitions) {
  if (!fs::exists(paths.meshrun) || !fs::exists(paths.recipe)) {
    std::cerr << "  skipping `meshrun check`: " << paths.meshrun << " or " << paths.recipe << " is missing\n";
    return std::nullopt;
  }
  std::vector<double> times;
  for (int rep = 0; rep < repetitions; ++rep) {
    const Run run = launch(1, "", [&](int) {
      meshrun::WorkerCommand command;
      command.argv = {paths.meshrun, "check", paths.recipe};
      return command;
    });
    times.push_back(run.wall);
    std::cerr << fmt::format("  meshrun check, repetition {}/{}: {:.3f} s\n", rep + 1, repetitions, run.wall);
  }
  return median(times);
}

// ---- 2. bandwidth ---------------------------------------------------------

void bench_bandwidth(const Paths& paths) {
  constexpr int kWorkers = 2;
  const int port = meshrun::choose_free_port(kLoopback);
  const Run run = launch(kWorkers, "bandwidth", [&](int rank) {
    meshrun::WorkerCommand command;
    command.argv = {paths.worker, "--bandwidth"};
    command.environment = meshrun::local_worker_environment_for(rank, rank, kWorkers, kWorkers, 0, kLoopback, port);
    return command;
  });
  if (run.rank0_lines.empty()) throw std::runtime_error("the bandwidth workers reported nothing");
  // nccl-tests' convention: algorithm bandwidth is bytes / time; bus
  // bandwidth scales it by 2(n-1)/n, what each link carries in a ring.
  const double bus_factor = 2.0 * (kWorkers - 1) / kWorkers;
  std::cout << fmt::format(
      "\nall_reduce on {} processes over loopback (Gloo): Group::all_reduce (meshrun) vs the bare c10d group\n"
      "under it (Group::native()), same tensor, alternating; median per op of the slower rank; GB/s = 1e9 B/s;\n"
      "ratio: of the two medians, and the median of each iteration's back-to-back pair\n\n",
      kWorkers);
  std::cout << fmt::format("{:>8}  {:>5}  {:>10}  {:>10}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}  {:>6}\n", "size",
                           "iters", "meshrun ms", "c10d ms", "meshrun algbw", "c10d algbw", "meshrun busbw",
                           "c10d busbw", "meshrun/c10d", "paired");
  for (const auto& line : run.rank0_lines) {
    const double bytes = line.at("bytes");
    const double wrapped = line.at("wrapped");
    const double bare = line.at("bare");
    const bool tiny = bytes < (1 << 20);  // a latency figure: no meaningful bandwidth
    const std::string size = tiny ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.0f} MiB", bytes / (1 << 20));
    auto rate = [&](double seconds, double factor) {
      return tiny ? std::string("—") : fmt::format("{:.2f} GB/s", bytes / seconds / 1e9 * factor);
    };
    std::cout << fmt::format("{:>8}  {:>5.0f}  {:>10.3f}  {:>10.3f}  {:>12}  {:>12}  {:>12}  {:>12}  {:>11.3f}×  {:>5.3f}×\n",
                             size, line.at("iterations"), wrapped * 1e3, bare * 1e3, rate(wrapped, 1), rate(bare, 1),
                             rate(wrapped, bus_factor), rate(bare, bus_factor), wrapped / bare, line.at("paired"));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench/startup: meshrun job startup vs Python torch.distributed, and all_reduce bandwidth vs bare c10d"};
  const fs::path here = fs::path(meshrun::this_executable_path()).parent_path();
  const fs::path source = MESHRUN_SOURCE_DIR;
  Paths paths{(here / "startup_worker").string(), MESHRUN_TORCH_PYTHON,
              (source / "bench" / "startup_worker.py").string(), (here.parent_path() / "meshrun").string(),
              (source / "recipes" / "quickstart.toml").string()};
  int repetitions = 7;
  int check_repetitions = 3;
  std::vector<int> worker_counts = {2, 4};
  bool skip_startup = false, skip_check = false, skip_bandwidth = false;
  app.add_option("--repetitions", repetitions, "Startup runs per side and worker count")->check(CLI::PositiveNumber);
  app.add_option("--workers", worker_counts, "Worker counts for the startup runs")->check(CLI::Range(1, 64));
  app.add_option("--check-repetitions", check_repetitions, "Runs of `meshrun check`")->check(CLI::PositiveNumber);
  app.add_option("--worker", paths.worker, "The startup_worker executable");
  app.add_option("--python", paths.python, "The Python with the torch meshrun is built against");
  app.add_option("--python-worker", paths.python_worker, "startup_worker.py");
  app.add_option("--meshrun", paths.meshrun, "The meshrun executable, for `meshrun check`");
  app.add_option("--recipe", paths.recipe, "A local multi-process cpu recipe for `meshrun check`");
  app.add_flag("--skip-startup", skip_startup, "Leave out the startup comparison with Python");
  app.add_flag("--skip-check", skip_check, "Leave out `meshrun check`");
  app.add_flag("--skip-bandwidth", skip_bandwidth, "Leave out the all_reduce bandwidth comparison");
  CLI11_PARSE(app, argc, argv);
  // Meson passes paths relative to the build folder through "../"; shown
  // and passed on in their plain form.
  for (std::string* path : {&paths.worker, &paths.python_worker, &paths.meshrun, &paths.recipe})
    *path = fs::weakly_canonical(fs::absolute(*path)).string();

  // The workers must not mistake this process's own launch for theirs: a
  // driver started under torchrun or srun would hand its variables on.
  if (meshrun::present_launcher(meshrun::ProcessEnvironment()) != "single")
    std::cerr << "warning: startup_bench runs under a launcher; its variables are inherited by `meshrun check`\n";

  try {
    const auto started = std::chrono::steady_clock::now();
    std::cout << "bench/startup on " << std::thread::hardware_concurrency() << " cores; load average "
              << load_average() << " at start\n"
              << meshrun::build_description() << "\n";
    std::vector<StartupResult> startup;
    std::optional<double> check;
    if (!skip_startup) startup = bench_startup(worker_counts, repetitions, paths);
    if (!skip_check) check = bench_check(paths, check_repetitions);
    if (!startup.empty()) print_startup(startup, repetitions);
    if (check) {
      std::cout << fmt::format("\n`meshrun check {}`, launch to exit, median of {}: {:.3f} s", paths.recipe,
                               check_repetitions, *check);
      const auto two = std::find_if(startup.begin(), startup.end(), [](const auto& r) { return r.workers == 2; });
      if (two != startup.end())
        std::cout << fmt::format(" ({:.2f}× the 2-process python launch-to-exit, {:.2f}× meshrun's)",
                                 *check / two->python.exited, *check / two->meshrun.exited);
      std::cout << "\n";
    }
    if (!skip_bandwidth) bench_bandwidth(paths);
    std::cout << fmt::format("\nload average {} at end; {:.0f} s in all\n", load_average(),
                             std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  } catch (const std::exception& error) {
    std::cerr << "startup_bench: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
