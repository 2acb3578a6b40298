// How a child ended. Its status is read with WNOWAIT so that the child stays
// a zombie until the supervisor is done with it: while it does, its pid and
// process group id cannot be handed to another process, so a late
// kill(-pgid) can only reach what is left of that worker.
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include <thread>

#include "supervisor.hpp"

namespace meshrun::launch_detail {

std::optional<ChildStatus> exit_status_without_reaping(pid_t pid) {
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    if (errno == EINTR) continue;
    // ECHILD: something else in this process reaped it.
    return ChildStatus{.lost = true};
  }
  if (info.si_pid == 0) return std::nullopt;
  ChildStatus status;
  if (info.si_code == CLD_EXITED) {
    status.status = info.si_status;
  } else {
    status.signaled = true;
    status.signal = info.si_status;
    status.core_dumped = info.si_code == CLD_DUMPED;
  }
  return status;
}

void reap(pid_t pid) {
  int ignored = 0;
  while (::waitpid(pid, &ignored, WNOHANG) < 0 && errno == EINTR) {
  }
}

std::optional<ChildStatus> wait_and_reap(pid_t pid, Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    if (auto status = exit_status_without_reaping(pid)) {
      reap(pid);
      return status;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void signal_process_group(pid_t process_group, int signal) {
  if (process_group > 0) ::kill(-process_group, signal);
}

std::string signal_name(int signal) {
  switch (signal) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGCHLD: return "SIGCHLD";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGSYS: return "SIGSYS";
    default: return fmt::format("signal {}", signal);
  }
}

std::string describe_status(const ChildStatus& status) {
  if (status.lost) return "ended, but its exit status was lost (another part of the program reaped it)";
  if (!status.signaled) return fmt::format("exited with status {}", status.status);
  return fmt::format("was killed by signal {} ({}{})", status.signal, signal_name(status.signal),
                     status.core_dumped ? ", core dumped" : "");
}

}  // namespace meshrun::launch_detail
