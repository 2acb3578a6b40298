// The local launcher's supervision loop. One thread does everything: poll()
// on every worker pipe and the signal pipe with a short timeout, then look
// at exits (waitid without reaping, so process groups stay reserved) and
// deadlines. The run moves through three phases:
//   running   until every worker has exited, or the first failure, the
//             timeout or a signal begins a stop;
//   stopping  SIGTERM (or the signal received) sent to every process group,
//             until the workers are gone or stop_grace_seconds pass;
//   killing   SIGKILL sent, until the workers are gone or kKillWait passes.
// Then whatever is left of each group is killed, the pipes are drained to
// their end (bounded) and the workers are reaped.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <stdexcept>

#include "local_launcher_internal.hpp"
#include "meshrun/metrics/console.hpp"
#include "meshrun/launch/launcher.hpp"

namespace meshrun {
namespace {

using namespace launch_detail;

constexpr auto kPollInterval = std::chrono::milliseconds(50);
// How long a worker may take to die after SIGKILL before the launcher gives
// up on it (it is stuck in the kernel, e.g. on a hung device or file system).
constexpr auto kKillWait = std::chrono::seconds(10);
// Reading what is left in the pipes once every process has been killed.
constexpr auto kFinalDrain = std::chrono::seconds(2);
constexpr std::size_t kReadChunk = 64 * 1024;

enum class Phase { running, stopping, killing };

Clock::duration seconds(double value) {
  value = std::min(value, 1e9);  // about 30 years; more would overflow the clock
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(value));
}

struct Worker {
  int rank = 0;
  SpawnedChild child;
  RankOutput output;
  std::optional<ChildStatus> status;
  bool stopped_by_launcher = false;

  bool running() const { return !status; }
  int& fd(WorkerStream stream) { return stream == WorkerStream::out ? child.stdout_fd : child.stderr_fd; }
};

class LocalRun {
 public:
  explicit LocalRun(const LocalLaunchOptions& options)
      : options_(options),
        out_(options.out ? *options.out : std::cout),
        err_(options.err ? *options.err : std::cerr),
        relay_(options.forward_signals) {}

  // Only reached with workers still around when an exception cut the run
  // short: they must not outlive it.
  ~LocalRun() {
    if (cleaned_up_) return;
    for (auto& worker : workers_) {
      signal_process_group(worker.child.pid, SIGKILL);
      for (int fd : {worker.child.stdout_fd, worker.child.stderr_fd})
        if (fd >= 0) ::close(fd);
      wait_and_reap(worker.child.pid, std::chrono::seconds(1));
    }
  }
  LocalRun(const LocalRun&) = delete;
  LocalRun& operator=(const LocalRun&) = delete;

  LocalLaunchResult run(const std::vector<WorkerCommand>& commands) {
    started_at_ = Clock::now();
    start_workers(commands);
    while (std::any_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.running(); })) {
      pump_output(time_to_next_deadline());
      handle_signals();
      check_exits();
      if (!check_deadlines()) break;
    }
    clean_up();
    return result();
  }

 private:
  void start_workers(const std::vector<WorkerCommand>& commands) {
    workers_.reserve(commands.size());
    for (int rank = 0; rank < static_cast<int>(commands.size()); ++rank) {
      const auto& command = commands[rank];
      try {
        auto child = spawn_child(command.argv, merged_environment(command.environment));
        const bool show_stdout = options_.show_all_ranks || rank == 0;
        workers_.push_back(Worker{rank, child, RankOutput(rank, show_stdout, out_, err_, options_.terminal), {}, false});
      } catch (const SpawnError& error) {
        fail(rank, fmt::format("rank {} could not start: {}", rank, error.what()), 1);
        begin_stop(SIGTERM, fmt::format("rank {} could not start", rank));
        return;
      }
    }
  }

  // Waits at most `timeout` for output, then reads what is there.
  void pump_output(Clock::duration timeout) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, WorkerStream>> owners;
    for (auto& worker : workers_)
      for (auto stream : {WorkerStream::out, WorkerStream::err})
        if (worker.fd(stream) >= 0) {
          fds.push_back({worker.fd(stream), POLLIN, 0});
          owners.emplace_back(&worker, stream);
        }
    if (relay_.fd() >= 0) fds.push_back({relay_.fd(), POLLIN, 0});
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::max(timeout, Clock::duration::zero()));
    if (::poll(fds.data(), fds.size(), static_cast<int>(ms.count())) <= 0) return;
    bool wrote = false;
    for (std::size_t i = 0; i < owners.size(); ++i)
      if (fds[i].revents != 0) wrote |= read_from(*owners[i].first, owners[i].second);
    if (wrote) {
      out_.flush();
      err_.flush();
    }
  }

  // One read, so that a worker writing without pause cannot starve the others.
  bool read_from(Worker& worker, WorkerStream stream) {
    char buffer[kReadChunk];
    int& fd = worker.fd(stream);
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      worker.output.append(stream, std::string_view(buffer, static_cast<std::size_t>(n)));
      return true;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    worker.output.finish(stream);
    ::close(fd);
    fd = -1;
    return true;
  }

  void handle_signals() {
    for (int signal : relay_.take_signals()) {
      if (phase_ == Phase::running) {
        fail(-1, "interrupted by " + signal_name(signal), 128 + signal);
        begin_stop(signal, "received " + signal_name(signal));
      } else if (phase_ == Phase::stopping) {
        say("[launcher] received " + signal_name(signal) + " while stopping: killing the workers now");
        begin_kill();
      }
    }
  }

  void check_exits() {
    for (auto& worker : workers_) {
      if (!worker.running()) continue;
      worker.status = exit_status_without_reaping(worker.child.pid);
      if (!worker.status || worker.status->success() || phase_ != Phase::running) continue;
      const auto what = fmt::format("rank {} {}", worker.rank, describe_status(*worker.status));
      fail(worker.rank, what, 1);
      begin_stop(SIGTERM, what);
    }
  }

  // False when the launcher gives up waiting for workers that ignore SIGKILL.
  bool check_deadlines() {
    const auto now = Clock::now();
    if (phase_ == Phase::running && options_.timeout_seconds &&
        now >= started_at_ + seconds(*options_.timeout_seconds)) {
      const auto what = fmt::format("timed out after {:g} s waiting for {}", *options_.timeout_seconds,
                                    rank_list(running_ranks()));
      fail(-1, what, 1);
      begin_stop(SIGTERM, what);
    } else if (phase_ == Phase::stopping && now >= phase_deadline_) {
      say(fmt::format("[launcher] {} still running {:g} s after the stop request: sending SIGKILL",
                      rank_list(running_ranks()), options_.stop_grace_seconds));
      begin_kill();
    } else if (phase_ == Phase::killing && now >= phase_deadline_) {
      failure_ += fmt::format("; {} did not exit after SIGKILL", rank_list(running_ranks()));
      return false;
    }
    return true;
  }

  Clock::duration time_to_next_deadline() const {
    Clock::duration wait = kPollInterval;
    const auto now = Clock::now();
    if (phase_ != Phase::running) wait = std::min(wait, phase_deadline_ - now);
    else if (options_.timeout_seconds)
      wait = std::min(wait, started_at_ + seconds(*options_.timeout_seconds) - now);
    return wait;
  }

  // One line of the launcher's own for stderr (through the terminal when
  // the workers' progress is drawn there).
  void say(const std::string& line) {
    if (options_.terminal) options_.terminal->line(line);
    else err_ << line << '\n';
  }

  // Records the first failure only.
  void fail(int rank, std::string what, int exit_code) {
    if (exit_code_ != 0) return;
    failed_rank_ = rank;
    failure_ = std::move(what);
    exit_code_ = exit_code;
  }

  void begin_stop(int signal, const std::string& reason) {
    const auto running = running_ranks();
    if (!running.empty())
      say(fmt::format("[launcher] {}: sending {} to {}", reason, signal_name(signal), rank_list(running)));
    err_.flush();
    phase_ = Phase::stopping;
    phase_deadline_ = Clock::now() + seconds(options_.stop_grace_seconds);
    for (auto& worker : workers_) {
      if (worker.running()) worker.stopped_by_launcher = true;
      // Exited workers too: their group may still hold grandchildren.
      signal_process_group(worker.child.pid, signal);
    }
  }

  void begin_kill() {
    phase_ = Phase::killing;
    phase_deadline_ = Clock::now() + kKillWait;
    for (auto& worker : workers_) signal_process_group(worker.child.pid, SIGKILL);
  }

  // Every worker has exited (or is beyond help). Grandchildren that still
  // hold a pipe open get SIGTERM and the grace period; then every group is
  // killed, so nothing the run started survives it.
  void clean_up() {
    if (any_pipe_open()) {
      for (auto& worker : workers_) signal_process_group(worker.child.pid, SIGTERM);
      drain_until(Clock::now() + seconds(options_.stop_grace_seconds));
    }
    for (auto& worker : workers_) signal_process_group(worker.child.pid, SIGKILL);
    drain_until(Clock::now() + kFinalDrain);
    for (auto& worker : workers_) {
      for (auto stream : {WorkerStream::out, WorkerStream::err}) {
        if (worker.fd(stream) < 0) continue;
        worker.output.finish(stream);
        ::close(worker.fd(stream));
        worker.fd(stream) = -1;
      }
      if (worker.status) reap(worker.child.pid);
    }
    if (options_.terminal) options_.terminal->finish();
    if (failed_rank_ >= 0 && failed_rank_ < static_cast<int>(workers_.size()))
      workers_[failed_rank_].output.show_hidden_tail();
    out_.flush();
    err_.flush();
    cleaned_up_ = true;
  }

  // Reads the pipes until they close or the deadline; a signal received
  // meanwhile (the user is in a hurry) ends the wait early.
  void drain_until(Clock::time_point deadline) {
    while (any_pipe_open() && Clock::now() < deadline) {
      pump_output(std::min<Clock::duration>(kPollInterval, deadline - Clock::now()));
      if (!relay_.take_signals().empty()) return;
    }
  }

  bool any_pipe_open() {
    return std::any_of(workers_.begin(), workers_.end(), [](Worker& w) {
      return w.fd(WorkerStream::out) >= 0 || w.fd(WorkerStream::err) >= 0;
    });
  }

  std::vector<int> running_ranks() const {
    std::vector<int> ranks;
    for (const auto& worker : workers_)
      if (worker.running()) ranks.push_back(worker.rank);
    return ranks;
  }

  LocalLaunchResult result() const {
    LocalLaunchResult result;
    result.exit_code = exit_code_;
    result.failed_rank = failed_rank_;
    result.failure = failure_;
    for (const auto& worker : workers_) {
      WorkerExit exit;
      exit.rank = worker.rank;
      exit.pid = worker.child.pid;
      exit.stopped_by_launcher = worker.stopped_by_launcher;
      if (worker.status) {
        exit.exited = true;
        exit.signaled = worker.status->signaled;
        exit.status = worker.status->status;
        exit.signal = worker.status->signal;
        exit.core_dumped = worker.status->core_dumped;
        exit.description = describe_status(*worker.status);
      } else {
        exit.description = "did not exit after SIGKILL";
      }
      result.workers.push_back(std::move(exit));
    }
    return result;
  }

  const LocalLaunchOptions& options_;
  std::ostream& out_;
  std::ostream& err_;
  SignalRelay relay_;
  std::vector<Worker> workers_;
  Phase phase_ = Phase::running;
  Clock::time_point started_at_;
  Clock::time_point phase_deadline_;
  int exit_code_ = 0;
  int failed_rank_ = -1;
  std::string failure_;
  bool cleaned_up_ = false;
};

void check_options(const LocalLaunchOptions& options) {
  if (options.workers < 1)
    throw std::logic_error(fmt::format("the local launcher needs at least 1 worker, not {}", options.workers));
  if (!options.command_for) throw std::logic_error("the local launcher needs command_for");
  if (!(options.stop_grace_seconds >= 0))
    throw std::logic_error(fmt::format("stop_grace_seconds must be 0 or more, not {:g}", options.stop_grace_seconds));
  if (options.timeout_seconds && !(*options.timeout_seconds > 0))
    throw std::logic_error(fmt::format("timeout_seconds must be more than 0, not {:g}", *options.timeout_seconds));
}

}  // namespace

LocalLaunchResult run_local_workers(const LocalLaunchOptions& options) {
  check_options(options);
  // Every command is known before the first process exists, so a bad one
  // (or an exception from command_for) leaves nothing to clean up.
  std::vector<WorkerCommand> commands;
  for (int rank = 0; rank < options.workers; ++rank) {
    commands.push_back(options.command_for(rank));
    if (commands.back().argv.empty() || commands.back().argv[0].empty())
      throw std::logic_error(fmt::format("the command for rank {} is empty", rank));
  }
  LocalRun run(options);
  return run.run(commands);
}

}  // namespace meshrun
