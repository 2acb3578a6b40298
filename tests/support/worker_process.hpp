// Test support: one rank of a multi-process test job, started as a real
// process with its output captured to a file of its own, and a free
// loopback port for the job to meet on. Used by tests/dist, tests/model and
// tests/train.
//
// Invariants: a WorkerProcess never outlives its object (the destructor
// kills and reaps a process still running, and removes the output file);
// every wait is bounded and kills the process when the bound passes. The
// child gets this process's environment minus every MESHRUN_* variable (a
// test's job must not pick up a launcher or token of the test's own
// environment), plus the `environment` given.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace meshrun::test {

// A port the kernel just handed out on 127.0.0.1, released for the job.
inline int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

class WorkerProcess {
 public:
  using Clock = std::chrono::steady_clock;

  // Throws std::runtime_error when the program cannot be started.
  WorkerProcess(std::vector<std::string> arguments, const std::map<std::string, std::string>& environment = {}) {
    static int counter = 0;
    output_path_ = (std::filesystem::temp_directory_path() /
                    ("meshrun-test-worker-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".log"))
                       .string();
    std::vector<std::string> variables;
    for (char** entry = environ; *entry; ++entry) {
      const std::string variable = *entry;
      const std::string name = variable.substr(0, variable.find('='));
      if (!environment.count(name) && name.rfind("MESHRUN_", 0) != 0) variables.push_back(variable);
    }
    for (const auto& [name, value] : environment) variables.push_back(name + "=" + value);
    std::vector<char*> argv, envp;
    for (auto& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    for (auto& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, output_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int status = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (status != 0) throw std::runtime_error("cannot start " + arguments.front());
  }

  ~WorkerProcess() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    std::filesystem::remove(output_path_, ignored);
  }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // The exit status (128 + signal when killed by one), or -1 when it is
  // still running after `limit` (then it is killed).
  int wait(std::chrono::milliseconds limit) {
    const auto deadline = Clock::now() + limit;
    while (!exited_) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (Clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        exited_ = true;
        return -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return exit_status_;
  }

  // Whether `text` appears in the output within `limit`.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds limit) const {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  void kill_now() { ::kill(pid_, SIGKILL); }
  void signal(int number) { ::kill(pid_, number); }

  std::string output() const {
    std::ifstream in(output_path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int exit_status_ = -1;
  std::string output_path_;
};

}  // namespace meshrun::test
