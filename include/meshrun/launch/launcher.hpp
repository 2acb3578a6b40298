// Starting processes: the local launcher (`meshrun run` on one machine, like
// `torchrun --standalone`) and the SLURM batch script of `meshrun submit
// --slurm`.
//
// run_local_workers() owns its workers from start to end. Invariants:
// - Each worker runs in a process group of its own, with stdin on /dev/null,
//   and dies with SIGKILL if the thread that started it dies (so call it from
//   a thread that outlives the call: it blocks until the end anyway).
// - When it returns, every worker has exited and been reaped, and each
//   worker's process group has been sent SIGKILL, so grandchildren die too.
//   (A grandchild that left its group with setsid() is out of reach.) The
//   one exception is a worker that does not die within 10 s of SIGKILL (a
//   process stuck in the kernel); the failure text then says so.
// - Every wait has a deadline: nothing blocks on a worker, a pipe or a timer
//   forever.
// - Only one call runs at a time in a process: SIGINT and SIGTERM handlers
//   are process-wide. The previous handlers are back in place on return.
// - Output policy: each line a worker writes is shown with a "[rank N] "
//   prefix. Rank 0's stdout and every rank's stderr are shown; other ranks'
//   stdout is read and dropped (all ranks usually log the same progress),
//   unless show_all_ranks is set. When a rank fails, the last lines of its
//   dropped stdout are shown after all (an error logged to stdout would
//   otherwise be lost). Stdout lines go to `out`, stderr lines and the
//   launcher's own "[launcher] ..." notices to `err`. A final line without a
//   newline is shown when the worker's pipe closes.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "meshrun/error.hpp"

namespace meshrun {

// The launcher could not do its own part on this machine: no free port, no
// signal pipe, no path of its own executable.
class LaunchError : public KindError<ErrorKind::dist> {
 public:
  using KindError::KindError;
};

class TerminalLine;

struct Recipe;  // meshrun/recipe/recipe.hpp
struct Plan;    // meshrun/plan/plan.hpp

// How to start one worker. argv[0] without a '/' is looked up on the PATH of
// the worker's environment (the launcher's, with `environment` on top).
struct WorkerCommand {
  std::vector<std::string> argv;
  std::map<std::string, std::string> environment;  // set or replaced in the launcher's environment
};

struct LocalLaunchOptions {
  int workers = 1;
  // Called once per rank (0 .. workers-1) before any worker starts. On one
  // node a rank is also the local rank.
  std::function<WorkerCommand(int rank)> command_for;
  bool show_all_ranks = false;
  // Stopping a worker: SIGTERM to its process group, then SIGKILL when it is
  // still running after this long.
  double stop_grace_seconds = 5;
  // For the whole run; on expiry every worker is stopped and the run fails
  // naming the ranks that were still running.
  std::optional<double> timeout_seconds;
  // SIGINT and SIGTERM sent to the launcher are passed on to every worker,
  // which are then stopped as above. Off: the signals keep their handlers.
  bool forward_signals = true;
  std::ostream* out = nullptr;  // nullptr: std::cout
  std::ostream* err = nullptr;  // nullptr: std::cerr
  // Set when the workers relay their progress (MESHRUN_CONSOLE=relay, in
  // their environment): every line for `err` then goes through this
  // terminal, the workers' progress lines drawn in place.
  TerminalLine* terminal = nullptr;
};

// How one worker ended.
struct WorkerExit {
  int rank = 0;
  int pid = 0;
  bool exited = false;   // false: still running when the launcher gave up on it
  bool signaled = false;  // killed by `signal` rather than exiting with `status`
  int status = 0;
  int signal = 0;
  bool core_dumped = false;
  bool stopped_by_launcher = false;  // it was still running when the launcher stopped the run
  std::string description;  // "exited with status 3", "was killed by signal 9 (SIGKILL)", ...
};

struct LocalLaunchResult {
  // 0: every worker exited with status 0. 1: a worker failed, could not
  // start, or the run timed out. 128 + N: the launcher received signal N
  // (SIGINT or SIGTERM) and stopped the workers.
  int exit_code = 0;
  int failed_rank = -1;  // the first rank that failed; -1 when none did
  // Empty on success, else the first failure, e.g. "rank 1 exited with
  // status 3", "rank 1 was killed by signal 9 (SIGKILL)", "timed out after
  // 30 s waiting for ranks 0, 2", "interrupted by SIGTERM".
  std::string failure;
  std::vector<WorkerExit> workers;  // by rank; only those that were started
};

// Starts options.workers processes and supervises them to the end (see the
// invariants above). Throws std::logic_error for options that make no sense
// (no workers, no command_for, an empty argv, negative times: the caller's
// bug) and when another call is already running in this process.
LocalLaunchResult run_local_workers(const LocalLaunchOptions& options);

// A TCP port that nothing listens on at `address` (an IPv4 or IPv6 literal,
// or a host name), found by binding port 0 and reading back the port the
// kernel chose. The port is free when this returns, not reserved: another
// process may take it before the rendezvous binds it, so a caller that
// loses that race must be ready to fail with a clear message (retrying with
// a new port needs every worker to learn it, i.e. a restart). Throws
// LaunchError when no socket can be bound there.
int choose_free_port(const std::string& address);

// Whether a TCP server could bind `port` on `address` now (with
// SO_REUSEADDR, as c10d's store does, so a port in TIME_WAIT counts as
// free). The same race as above applies. A port outside [1, 65535] is
// std::logic_error.
bool port_is_free(const std::string& address, int port);

// The absolute path of the running executable (/proc/self/exe), for
// starting more copies of meshrun. Throws LaunchError when unknown.
std::string this_executable_path();

// `meshrun submit RECIPE --slurm`.
struct SbatchOptions {
  // As the compute nodes see them: absolute paths on a shared file system.
  std::string meshrun_binary;
  std::string recipe_path;
  std::vector<std::string> sets;  // "section.key=value", each passed as `--set` in order
  std::optional<std::string> partition;
  std::optional<std::string> account;
  std::optional<std::string> time;  // SLURM's format, e.g. "2-00:00:00"; none: the partition's default
  // The job's log file (SLURM patterns such as %j allowed); empty:
  // "<recipe name>-%j.out" with characters other than letters, digits, '.',
  // '_' and '-' of the name replaced by '_'.
  std::string output;
};

// The batch script: #SBATCH lines for the job name, nodes, tasks (and GPUs on
// cuda) per node of plan.cluster, then one `srun --kill-on-bad-exit=1
// --distribution=block meshrun run RECIPE --set ...` step, with every
// argument quoted for the shell. After options.sets come the overrides the
// job needs, each explained in a comment: `launch.type=slurm` when the
// recipe's type is neither "slurm" nor "auto" (under srun only SLURM's
// variables describe the tasks), and launch.nodes / procs_per_node / device
// where plan.cluster differs from the recipe's [launch] (a plan made with
// --cluster), so that every task expects the world the job gets. Throws
// ConfigError for values a script cannot hold (newlines, NUL; the recipe
// name carries its key) and std::logic_error for empty paths.
std::string make_sbatch_script(const Recipe& recipe, const Plan& plan,
                               const SbatchOptions& options);

// Writes the script to `path` atomically (a temporary file in the same
// folder, then rename), mode 0755. Throws KindError<ErrorKind::io>.
void write_sbatch_script(const std::string& path, const std::string& script);

struct SbatchSubmission {
  // sbatch's exit status; 127 when sbatch could not be run, 124 when it did
  // not finish within the timeout (it is then killed).
  int exit_code = 0;
  std::string output;  // what sbatch printed, stdout then stderr
  std::string job_id;  // from "Submitted batch job N"; empty when not found
  std::string error;   // empty on success, else what went wrong, in words
};

// Runs `sbatch SCRIPT` (found on PATH) and waits at most timeout_seconds.
// Not while run_local_workers() runs (std::logic_error): both need SIGCHLD.
SbatchSubmission submit_sbatch(const std::string& script_path, double timeout_seconds = 60);

// `word` quoted for a POSIX shell: as is when it holds only characters that
// need no quoting, else in single quotes ('\'' for a quote inside).
std::string shell_quote(const std::string& word);

}  // namespace meshrun
