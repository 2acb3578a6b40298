// Tensor parallelism with real processes: two ranks over Gloo on loopback
// (tests/model/programs/model_worker) compare the tp=2 model with the tp=1
// model of the same seed: logits, vocab-parallel cross-entropy, log-probs
// and gathered gradients within 1e-5, save and reload.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "model_fixtures.hpp"
#include "model_worker_program.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

int free_port() {
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

class Rank {
 public:
  Rank(int rank, int world, int port, const std::string& directory, const std::string& log) : log_(log) {
    std::vector<std::string> arguments{MESHRUN_MODEL_WORKER_PROGRAM, std::to_string(rank), std::to_string(world),
                                       std::to_string(port), "60000", directory};
    std::vector<std::string> variables;
    for (char** entry = environ; *entry; ++entry)
      if (std::string(*entry).rfind("MESHRUN_", 0) != 0) variables.emplace_back(*entry);
    std::vector<char*> argv, envp;
    for (auto& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    for (auto& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int status = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE_MESSAGE(status == 0, "cannot start " << argv[0]);
  }
  ~Rank() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // Exit status; -1 (and killed) when still running after `limit`.
  int wait(std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        done_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }
  std::string output() const {
    std::ifstream in(log_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  pid_t pid_ = -1;
  bool done_ = false;
  std::string log_;
};

}  // namespace

TEST_CASE("tp=2 over Gloo equals tp=1: logits, cross-entropy, log-probs and gradients within 1e-5") {
  model_test::TempDir dir;
  const int port = free_port();
  Rank rank0(0, 2, port, dir.path().string(), dir.file("rank0.log"));
  Rank rank1(1, 2, port, dir.path().string(), dir.file("rank1.log"));
  CHECK_MESSAGE(rank0.wait(std::chrono::seconds(90)) == 0, rank0.output());
  CHECK_MESSAGE(rank1.wait(std::chrono::seconds(30)) == 0, rank1.output());
  for (const Rank* rank : {&rank0, &rank1}) {
    const std::string output = rank->output();
    CHECK_MESSAGE(output.find(" ok variant 0 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 1 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 0 checkpointed logits ") != std::string::npos, output);
  }
  // The split model was saved as full Hugging Face tensors.
  CHECK(std::filesystem::exists(dir.file("variant-0/model.safetensors")));
  CHECK(std::filesystem::exists(dir.file("variant-1/config.json")));
}
