// Running short commands to their end with their output captured
// (capture_command), and `sbatch SCRIPT` with it: its output is short, and
// its run is bounded, since a hung slurmctld makes sbatch wait for minutes.
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <regex>

#include "meshrun/launch/launcher.hpp"
#include "supervisor.hpp"

namespace meshrun {
namespace {

using namespace launch_detail;

constexpr auto kPipePollInterval = std::chrono::milliseconds(50);
constexpr auto kDrainAfterExit = std::chrono::seconds(1);

struct Captured {
  std::optional<ChildStatus> status;  // nullopt: killed at the deadline
  std::string out, err;
};

// Reads whatever each open pipe holds; closes a pipe at its end.
void read_pipes(int (&fds)[2], std::string* (&sinks)[2], Clock::duration timeout) {
  pollfd entries[2];
  nfds_t count = 0;
  int which[2];
  for (int i = 0; i < 2; ++i)
    if (fds[i] >= 0) {
      entries[count] = {fds[i], POLLIN, 0};
      which[count++] = i;
    }
  if (count == 0) return;
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(std::max(timeout, Clock::duration::zero()));
  if (::poll(entries, count, static_cast<int>(ms.count())) <= 0) return;
  for (nfds_t k = 0; k < count; ++k) {
    if (entries[k].revents == 0) continue;
    const int i = which[k];
    char buffer[4096];
    const ssize_t n = ::read(fds[i], buffer, sizeof buffer);
    if (n > 0) {
      sinks[i]->append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      ::close(fds[i]);
      fds[i] = -1;
    }
  }
}

Captured run_captured(const SpawnedChild& child, Clock::duration timeout) {
  Captured captured;
  int fds[2] = {child.stdout_fd, child.stderr_fd};
  std::string* sinks[2] = {&captured.out, &captured.err};
  const auto deadline = Clock::now() + timeout;
  while (!captured.status && Clock::now() < deadline) {
    read_pipes(fds, sinks, std::min<Clock::duration>(kPipePollInterval, deadline - Clock::now()));
    captured.status = exit_status_without_reaping(child.pid);
  }
  if (!captured.status) signal_process_group(child.pid, SIGKILL);
  const auto drain_deadline = Clock::now() + kDrainAfterExit;
  while ((fds[0] >= 0 || fds[1] >= 0) && Clock::now() < drain_deadline)
    read_pipes(fds, sinks, drain_deadline - Clock::now());
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  // Whatever sbatch left in its group (nothing, normally) goes with it.
  signal_process_group(child.pid, SIGKILL);
  if (captured.status) reap(child.pid);
  else wait_and_reap(child.pid, std::chrono::seconds(5));
  return captured;
}

std::string submitted_job_id(const std::string& output) {
  static const std::regex submitted(R"(Submitted batch job (\d+))");
  std::smatch match;
  return std::regex_search(output, match, submitted) ? match[1].str() : std::string();
}

}  // namespace

namespace launch_detail {

CapturedCommand capture_command(const std::vector<std::string>& argv, const std::string& what,
                                double timeout_seconds) {
  CapturedCommand result;
  SignalRelay sigchld_guard(false);
  SpawnedChild child;
  try {
    child = spawn_child(argv, merged_environment({}));
  } catch (const SpawnError& error) {
    result.exit_code = 127;
    result.error = fmt::format("cannot run {} ({})", what, error.what());
    return result;
  }
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::clamp(timeout_seconds, 0.0, 1e9)));
  const auto captured = run_captured(child, timeout);
  result.out = captured.out;
  result.err = captured.err;
  if (!captured.status) {
    result.exit_code = 124;
    result.error = fmt::format("{} did not finish within {:g} s and was stopped", what, timeout_seconds);
    return result;
  }
  result.exit_code = captured.status->lost       ? 1
                     : captured.status->signaled ? 128 + captured.status->signal
                                                 : captured.status->status;
  if (!captured.status->success()) result.error = what + " " + describe_status(*captured.status);
  return result;
}

}  // namespace launch_detail

SbatchSubmission submit_sbatch(const std::string& script_path, double timeout_seconds) {
  CapturedCommand run = capture_command({"sbatch", script_path}, "sbatch", timeout_seconds);
  SbatchSubmission result;
  result.exit_code = run.exit_code;
  result.output = run.out + run.err;
  result.error = run.error;
  if (run.exit_code == 127)
    result.error += fmt::format(": submit from a machine with SLURM's commands, or submit {} there yourself",
                                script_path);
  if (result.error.empty()) result.job_id = submitted_job_id(run.out);
  return result;
}

}  // namespace meshrun
