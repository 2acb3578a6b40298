// The engine's equivalence with real processes on Gloo: two ranks of
// tests/train/programs/train_worker train builtin:tiny in fp32 under one
// process, dp=2 at each ZeRO stage, tp=2, dp=2 with two micro-steps, ZeRO-3
// with gradient checkpointing and ZeRO-2 with offload; each must give the
// one-process loss curve and final weights within 1e-5 (relative; the
// worker uses adam_eps 1e-5 so that Adam does not magnify the last-bit
// differences of summation order, see train_worker.cpp).
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
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "train_worker_program.hpp"

extern char** environ;

namespace meshrun {
namespace {

using namespace std::chrono_literals;

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

class TrainWorker {
 public:
  TrainWorker(int rank, int world, int port) {
    output_path_ = (std::filesystem::temp_directory_path() /
                    ("meshrun-train-worker-" + std::to_string(getpid()) + "-" + std::to_string(rank) + ".log"))
                       .string();
    std::vector<std::string> arguments{MESHRUN_TRAIN_WORKER_PROGRAM, std::to_string(rank), std::to_string(world),
                                       std::to_string(port), "60000"};
    std::vector<std::string> variables;
    for (char** entry = environ; *entry; ++entry)
      if (std::string(*entry).rfind("MESHRUN_", 0) != 0) variables.push_back(*entry);
    // One thread each: two ranks share the test machine's cores.
    variables.push_back("OMP_NUM_THREADS=1");
    std::vector<char*> argv, envp;
    for (auto& argument : arguments) argv.push_back(argument.data());
    argv.push_back(nullptr);
    for (auto& variable : variables) envp.push_back(variable.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, output_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    const int status = posix_spawn(&pid_, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE_MESSAGE(status == 0, "cannot start " << argv[0]);
  }

  ~TrainWorker() {
    if (!exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    std::filesystem::remove(output_path_, ignored);
  }

  // The exit status, or -1 (killed) after `limit`.
  int wait(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(20ms);
    }
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    exited_ = true;
    return -1;
  }

  std::string output() const {
    std::ifstream in(output_path_);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string output_path_;
};

struct LayoutResult {
  std::vector<double> losses;
  double weight_rel_diff = -1;
  double loss_rel_diff = -1;
};

std::map<std::string, LayoutResult> parse_layouts(const std::string& output) {
  std::map<std::string, LayoutResult> layouts;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string word, name;
    fields >> word >> name;
    if (word != "layout") continue;
    LayoutResult result;
    fields >> word;  // "losses"
    for (double loss; fields >> loss;) result.losses.push_back(loss);
    fields.clear();
    fields >> word >> result.weight_rel_diff >> word >> result.loss_rel_diff;
    layouts[name] = result;
  }
  return layouts;
}

TEST_CASE("dp, every ZeRO stage, tp, accumulation, checkpointing and offload train like one process") {
  const int port = free_port();
  TrainWorker rank0(0, 2, port), rank1(1, 2, port);
  const int status0 = rank0.wait(120s);
  const int status1 = rank1.wait(20s);
  REQUIRE_MESSAGE(status0 == 0, rank0.output());
  REQUIRE_MESSAGE(status1 == 0, rank1.output());
  CHECK(rank0.output().find("collectives ok") != std::string::npos);
  CHECK(rank1.output().find("collectives ok") != std::string::npos);

  const auto layouts = parse_layouts(rank0.output());
  INFO(rank0.output());
  REQUIRE(layouts.count("single"));
  const auto& single = layouts.at("single");
  REQUIRE(single.losses.size() == 5);
  CHECK(single.losses.back() < single.losses.front());  // it learns
  constexpr double kTolerance = 1e-5;
  for (const std::string name : {"dp2", "dp2_zero1", "dp2_zero2", "dp2_zero3", "tp2", "dp2_accum2",
                                 "dp2_zero3_checkpointing", "dp2_zero2_offload"}) {
    CAPTURE(name);
    REQUIRE(layouts.count(name));
    const auto& layout = layouts.at(name);
    REQUIRE(layout.losses.size() == 5);
    for (size_t step = 0; step < 5; ++step)
      CHECK(layout.losses[step] == doctest::Approx(single.losses[step]).epsilon(kTolerance));
    CHECK(layout.weight_rel_diff >= 0);
    CHECK(layout.weight_rel_diff < kTolerance);
    CHECK(layout.loss_rel_diff < kTolerance);
  }
}

}  // namespace
}  // namespace meshrun
