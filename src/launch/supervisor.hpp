// The pieces the local launcher and `meshrun submit` build on: starting a
// child process safely from a multithreaded program, learning how it ended
// without reaping it, relaying SIGINT/SIGTERM through a self-pipe, and
// cutting pipe output into lines.
//
// Invariants: every file descriptor made here is close-on-exec (a worker
// must not inherit another worker's pipe, or that pipe never reaches end of
// file); the child side of spawn_child() between fork and exec calls only
// async-signal-safe functions; no function here blocks without a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include "meshrun/error.hpp"

namespace meshrun::launch_detail {

using Clock = std::chrono::steady_clock;

// A child could not be started; the message says which and why.
class SpawnError : public KindError<ErrorKind::dist> {
 public:
  using KindError::KindError;
};

// The environment of this process with `additions` set on top, as "K=V".
std::vector<std::string> merged_environment(const std::map<std::string, std::string>& additions);

// The file `name` runs: `name` itself when it holds a '/', else the first
// executable file of that name in the folders of `path_variable`
// (colon-separated; an empty entry is the current folder). nullopt when
// there is none.
std::optional<std::string> find_executable(const std::string& name, std::string_view path_variable);

struct SpawnedChild {
  pid_t pid = -1;  // also its process group id
  int stdout_fd = -1;  // read ends, non-blocking, close-on-exec
  int stderr_fd = -1;
};

// Starts argv with `environment` ("K=V", the whole environment) in a new
// process group of its own, stdin on /dev/null, stdout and stderr on pipes,
// SIGINT/SIGTERM/SIGPIPE at their defaults and no signal blocked, and
// PR_SET_PDEATHSIG = SIGKILL tied to the calling thread. Returns once exec
// has succeeded (or after 10 s without news, the child still starting).
// Throws SpawnError when the program is not found or exec fails (the child
// has then been reaped).
SpawnedChild spawn_child(const std::vector<std::string>& argv,
                         const std::vector<std::string>& environment);

struct ChildStatus {
  bool signaled = false;
  int status = 0;  // exit status when !signaled
  int signal = 0;  // when signaled
  bool core_dumped = false;
  bool lost = false;  // it ended, but its status was reaped by someone else
  bool success() const { return !lost && !signaled && status == 0; }
};

// How the child `pid` ended, or nullopt while it runs. It is not reaped, so
// its pid (and process group id) cannot be reused until reap() is called.
std::optional<ChildStatus> exit_status_without_reaping(pid_t pid);

// Reaps a child that exit_status_without_reaping() saw end.
void reap(pid_t pid);

// Waits at most `timeout` for the child to end, then reaps it. Returns its
// status, or nullopt when it was still running at the deadline.
std::optional<ChildStatus> wait_and_reap(pid_t pid, Clock::duration timeout);

// kill(-process_group, signal), ignoring a group that no longer exists.
void signal_process_group(pid_t process_group, int signal);

// "SIGKILL", "SIGTERM", ...; "signal 42" for one without a common name.
std::string signal_name(int signal);

// "exited with status 3", "was killed by signal 11 (SIGSEGV, core dumped)".
std::string describe_status(const ChildStatus& status);

// While alive, SIGINT and SIGTERM are caught and their numbers written to a
// pipe that the supervisor polls (a handler may only do async-signal-safe
// work, and a pipe wakes poll() at once). SIGCHLD is set to its default
// while alive when it was ignored, since an ignored SIGCHLD makes the
// kernel reap children before their status can be read. The destructor
// puts every handler back. One instance at a time per process.
class SignalRelay {
 public:
  // catch_signals false: only the SIGCHLD guard.
  explicit SignalRelay(bool catch_signals);
  ~SignalRelay();
  SignalRelay(const SignalRelay&) = delete;
  SignalRelay& operator=(const SignalRelay&) = delete;

  int fd() const { return read_fd_; }  // -1 when signals are not caught
  std::vector<int> take_signals();     // the signals received since the last call

 private:
  bool catch_signals_ = false;
  int read_fd_ = -1;
  int write_fd_ = -1;
  struct SavedActions;
  std::unique_ptr<SavedActions> saved_;
};

// Cuts a byte stream into lines. A line longer than kMaxLine is passed on
// in pieces of that size, so a worker that never writes a newline cannot
// make the launcher's memory grow without bound.
class LineSplitter {
 public:
  static constexpr std::size_t kMaxLine = 64 * 1024;
  using Emit = std::function<void(std::string_view line)>;  // without the '\n'

  void append(std::string_view data, const Emit& emit);
  // Passes on the final partial line, if any.
  void finish(const Emit& emit);

 private:
  std::string partial_;
  bool cut_at_limit_ = false;  // the last append ended exactly at a cut
};

// A short command run to its end with its output captured in full (sbatch,
// `ray list nodes`): at most `timeout`, after which its process group is
// killed.
struct CapturedCommand {
  // Its exit status (128 + N when killed by signal N); 127 when it could not
  // be started, 124 when it ran past the timeout.
  int exit_code = 0;
  std::string out, err;
  std::string error;  // empty on success, else what went wrong, in words
};
// `what` names the command in `error`, e.g. "sbatch". Not while
// run_local_workers() runs (std::logic_error): both need SIGCHLD.
CapturedCommand capture_command(const std::vector<std::string>& argv, const std::string& what, double timeout_seconds);

}  // namespace meshrun::launch_detail
