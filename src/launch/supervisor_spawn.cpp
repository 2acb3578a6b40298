// Starting a child process from a program that may already run threads
// (LibTorch starts them): everything the child needs is prepared before
// fork(), and the child only calls async-signal-safe functions until exec.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "supervisor.hpp"

extern char** environ;

namespace meshrun::launch_detail {
namespace {

constexpr auto kExecReportTimeout = std::chrono::seconds(10);

struct Pipe {
  int read_end = -1;
  int write_end = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw SpawnError(std::string("cannot create a pipe: ") + std::strerror(errno));
  return {fds[0], fds[1]};
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// The fds of one spawn attempt, closed on every path out of spawn_child().
struct SpawnFds {
  Pipe out, err, exec_report;
  int null_input = -1;
  ~SpawnFds() {
    for (int* fd : {&out.read_end, &out.write_end, &err.read_end, &err.write_end,
                    &exec_report.read_end, &exec_report.write_end, &null_input})
      close_fd(*fd);
  }
};

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

std::string_view path_of(const std::vector<std::string>& environment) {
  for (const auto& entry : environment)
    if (entry.starts_with("PATH=")) return std::string_view(entry).substr(5);
  return {};
}

// Tells the parent why the child cannot exec, and ends the child.
[[noreturn]] void fail_in_child(int report_fd, int error) {
  (void)!::write(report_fd, &error, sizeof error);
  ::_exit(127);
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void become_child(const SpawnFds& fds, pid_t launcher, const char* path,
                               char* const* argv, char* const* envp) {
  const auto fail = [&](int error) { fail_in_child(fds.exec_report.write_end, error); };
  if (::setpgid(0, 0) != 0) fail(errno);
  // Dies with the launcher's thread. The parent may have died before the
  // prctl took effect; then we were already re-parented.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail(errno);
  if (::getppid() != launcher) ::_exit(127);

  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  ::sigemptyset(&default_action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD}) ::sigaction(signal, &default_action, nullptr);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);

  if (::dup2(fds.null_input, STDIN_FILENO) < 0 || ::dup2(fds.out.write_end, STDOUT_FILENO) < 0 ||
      ::dup2(fds.err.write_end, STDERR_FILENO) < 0)
    fail(errno);
  ::execve(path, argv, envp);
  fail_in_child(fds.exec_report.write_end, errno);
}

// The errno the child reported, or 0 once exec succeeded (the report pipe
// closed on exec) or nothing came within the deadline.
int exec_error(int report_fd) {
  const auto deadline = Clock::now() + kExecReportTimeout;
  int error = 0;
  std::size_t received = 0;
  while (received < sizeof error) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return 0;
    pollfd entry{report_fd, POLLIN, 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return 0;
    const ssize_t n = ::read(report_fd, reinterpret_cast<char*>(&error) + received, sizeof error - received);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 0;
    received += static_cast<std::size_t>(n);
  }
  return error;
}

}  // namespace

std::vector<std::string> merged_environment(const std::map<std::string, std::string>& additions) {
  std::vector<std::string> merged;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string_view text(*entry);
    const auto name = text.substr(0, text.find('='));
    if (!additions.contains(std::string(name))) merged.emplace_back(text);
  }
  for (const auto& [name, value] : additions) merged.push_back(name + "=" + value);
  return merged;
}

std::optional<std::string> find_executable(const std::string& name, std::string_view path_variable) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) return name;
  while (true) {
    const auto colon = path_variable.find(':');
    const auto folder = path_variable.substr(0, colon);
    std::string candidate(folder.empty() ? std::string_view(".") : folder);
    candidate.append("/").append(name);
    struct stat info {};
    if (::stat(candidate.c_str(), &info) == 0 && S_ISREG(info.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    if (colon == std::string_view::npos) return std::nullopt;
    path_variable.remove_prefix(colon + 1);
  }
}

SpawnedChild spawn_child(const std::vector<std::string>& argv,
                         const std::vector<std::string>& environment) {
  if (argv.empty() || argv[0].empty()) throw SpawnError("no program to run (empty command)");
  const auto path = find_executable(argv[0], path_of(environment));
  if (!path) throw SpawnError("'" + argv[0] + "' was not found on PATH");

  SpawnFds fds;
  fds.out = make_pipe();
  fds.err = make_pipe();
  fds.exec_report = make_pipe();
  fds.null_input = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fds.null_input < 0) throw SpawnError(std::string("cannot open /dev/null: ") + std::strerror(errno));
  const auto argv_pointers = c_strings(argv);
  const auto envp_pointers = c_strings(environment);
  const pid_t launcher = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) throw SpawnError(std::string("fork failed: ") + std::strerror(errno));
  if (pid == 0) become_child(fds, launcher, path->c_str(), argv_pointers.data(), envp_pointers.data());

  // Also from this side, so that signalling the group right after fork()
  // cannot miss the child; EACCES once it has exec'd is harmless.
  ::setpgid(pid, pid);
  close_fd(fds.out.write_end);
  close_fd(fds.err.write_end);
  close_fd(fds.exec_report.write_end);
  if (const int error = exec_error(fds.exec_report.read_end); error != 0) {
    signal_process_group(pid, SIGKILL);
    wait_and_reap(pid, std::chrono::seconds(10));
    throw SpawnError("cannot run " + *path + ": " + std::strerror(error));
  }
  for (int fd : {fds.out.read_end, fds.err.read_end}) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  SpawnedChild child{pid, fds.out.read_end, fds.err.read_end};
  fds.out.read_end = fds.err.read_end = -1;  // now the caller's
  return child;
}

}  // namespace meshrun::launch_detail
