// The local launcher with real processes: /bin/sh scripts as workers.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "test_program_paths.hpp"
#include "local_launcher_test_support.hpp"
#include "meshrun/launch/env.hpp"
#include "meshrun/launch/launcher.hpp"

namespace meshrun {
namespace {

using launch_test::count_lines;
using launch_test::elapsed_seconds;
using launch_test::process_is_gone;
using launch_test::TemporaryFolder;

// A run of `workers` copies of `script`, each with the local launcher's
// variables for its rank; output goes to the two strings.
struct ScriptRun {
  int workers = 1;
  std::string script;
  LocalLaunchOptions options;
  std::ostringstream out, err;

  ScriptRun(int worker_count, std::string script_text) : workers(worker_count), script(std::move(script_text)) {
    options.workers = workers;
    options.stop_grace_seconds = 4;  // stops that take less prove SIGTERM worked
    options.timeout_seconds = 30;  // a hung test fails instead of hanging
    options.out = &out;
    options.err = &err;
    options.command_for = [this](int rank) {
      return WorkerCommand{{"/bin/sh", "-c", script},
                           local_worker_environment_for(rank, rank, workers, workers, 0, "127.0.0.1", 29500)};
    };
  }
  LocalLaunchResult run() { return run_local_workers(options); }
};

TEST_CASE("two workers: every line prefixed, rank 0's stdout and every rank's stderr shown") {
  ScriptRun run(2, R"(echo "out $RANK/$LOCAL_RANK of $WORLD_SIZE via $MESHRUN_LAUNCHER"; echo "err $RANK" >&2)");
  const auto result = run.run();
  CHECK(result.exit_code == 0);
  CHECK(result.failed_rank == -1);
  CHECK(result.failure.empty());
  CHECK(run.out.str() == "[rank 0] out 0/0 of 2 via local\n");
  CHECK(run.err.str().find("[rank 0] err 0\n") != std::string::npos);
  CHECK(run.err.str().find("[rank 1] err 1\n") != std::string::npos);
  CHECK(run.err.str().find("[launcher]") == std::string::npos);
  REQUIRE(result.workers.size() == 2);
  for (const auto& worker : result.workers) {
    CHECK(worker.exited);
    CHECK_FALSE(worker.signaled);
    CHECK(worker.status == 0);
    CHECK_FALSE(worker.stopped_by_launcher);
    CHECK(worker.description == "exited with status 0");
  }
}

TEST_CASE("four workers with show_all_ranks: every rank's lines, in each rank's order") {
  ScriptRun run(4, R"(for i in 1 2 3; do echo "line $i of $RANK"; done)");
  run.options.show_all_ranks = true;
  REQUIRE(run.run().exit_code == 0);
  const auto out = run.out.str();
  CHECK(count_lines(out) == 12);
  for (int rank = 0; rank < 4; ++rank) {
    const auto prefix = "[rank " + std::to_string(rank) + "] line ";
    const auto first = out.find(prefix + "1 of " + std::to_string(rank) + "\n");
    const auto second = out.find(prefix + "2 of " + std::to_string(rank) + "\n");
    const auto third = out.find(prefix + "3 of " + std::to_string(rank) + "\n");
    REQUIRE(first != std::string::npos);
    REQUIRE(second != std::string::npos);
    REQUIRE(third != std::string::npos);
    CHECK(first < second);
    CHECK(second < third);
  }
}

TEST_CASE("the command's environment is set over the launcher's") {
  ::setenv("MESHRUN_LAUNCHER_TEST_INHERITED", "from the launcher", 1);
  ::setenv("MESHRUN_LAUNCHER_TEST_REPLACED", "old", 1);
  ScriptRun run(1, R"(echo "$MESHRUN_LAUNCHER_TEST_INHERITED|$MESHRUN_LAUNCHER_TEST_REPLACED|$MESHRUN_LAUNCHER_TEST_ADDED")");
  run.options.command_for = [&](int) {
    return WorkerCommand{{"sh", "-c", run.script},  // found on PATH
                         {{"MESHRUN_LAUNCHER_TEST_REPLACED", "new"}, {"MESHRUN_LAUNCHER_TEST_ADDED", "a b"}}};
  };
  CHECK(run.run().exit_code == 0);
  CHECK(run.out.str() == "[rank 0] from the launcher|new|a b\n");
  ::unsetenv("MESHRUN_LAUNCHER_TEST_INHERITED");
  ::unsetenv("MESHRUN_LAUNCHER_TEST_REPLACED");
}

TEST_CASE("a worker exiting with status 3 stops the others and is named") {
  ScriptRun run(3, R"(if [ "$RANK" = 1 ]; then exit 3; fi; sleep 1000)");
  const auto start = std::chrono::steady_clock::now();
  const auto result = run.run();
  CHECK(elapsed_seconds(start) < 3);  // SIGTERM ends sleep at once: no waiting out the grace period
  CHECK(result.exit_code == 1);
  CHECK(result.failed_rank == 1);
  CHECK(result.failure == "rank 1 exited with status 3");
  REQUIRE(result.workers.size() == 3);
  CHECK_FALSE(result.workers[1].stopped_by_launcher);
  CHECK(result.workers[1].status == 3);
  for (int rank : {0, 2}) {
    CAPTURE(rank);
    CHECK(result.workers[rank].stopped_by_launcher);
    CHECK(result.workers[rank].signaled);
    CHECK(result.workers[rank].signal == SIGTERM);
  }
  CHECK(run.err.str().find("[launcher] rank 1 exited with status 3: sending SIGTERM to ranks 0, 2\n") !=
        std::string::npos);
}

TEST_CASE("a worker killed by a signal is named with the signal") {
  ScriptRun run(2, R"(if [ "$RANK" = 1 ]; then kill -KILL $$; fi; sleep 1000)");
  const auto result = run.run();
  CHECK(result.exit_code == 1);
  CHECK(result.failed_rank == 1);
  CHECK(result.failure == "rank 1 was killed by signal 9 (SIGKILL)");
  CHECK(result.workers[0].stopped_by_launcher);
}

// Shell code that waits (at most 10 s) until `file` exists: a worker that
// fails only once another is ready keeps a test free of races.
std::string wait_for(const TemporaryFolder& folder, const std::string& file) {
  const auto path = shell_quote((folder.path() / file).string());
  return "i=0; while [ ! -e " + path + " ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; ";
}

std::string touch(const TemporaryFolder& folder, const std::string& file) {
  return "touch " + shell_quote((folder.path() / file).string()) + "; ";
}

TEST_CASE("a worker that ignores SIGTERM gets SIGKILL after the grace period") {
  TemporaryFolder folder;
  ScriptRun run(2, R"(if [ "$RANK" = 1 ]; then )" + wait_for(folder, "trapped") + "exit 1; fi; trap '' TERM; " +
                       touch(folder, "trapped") + "sleep 1000");
  run.options.stop_grace_seconds = 0.5;
  const auto start = std::chrono::steady_clock::now();
  const auto result = run.run();
  const double elapsed = elapsed_seconds(start);
  CHECK(elapsed >= 0.5);
  CHECK(elapsed < 3);
  CHECK(result.failure == "rank 1 exited with status 1");
  CHECK(result.workers[0].signal == SIGKILL);
  CHECK(run.err.str().find("[launcher] rank 0 still running 0.5 s after the stop request: sending SIGKILL\n") !=
        std::string::npos);
}

TEST_CASE("the run's timeout stops the workers and names the ranks still running") {
  ScriptRun run(3, R"(if [ "$RANK" = 1 ]; then exit 0; fi; sleep 1000)");
  run.options.timeout_seconds = 0.5;
  const auto start = std::chrono::steady_clock::now();
  const auto result = run.run();
  CHECK(elapsed_seconds(start) < 2.5);
  CHECK(result.exit_code == 1);
  CHECK(result.failed_rank == -1);
  CHECK(result.failure == "timed out after 0.5 s waiting for ranks 0, 2");
  CHECK_FALSE(result.workers[1].stopped_by_launcher);
  CHECK(result.workers[0].stopped_by_launcher);
  CHECK(result.workers[2].stopped_by_launcher);
}

void ignore_test_signal(int) {}

// Sends `signal` to this process (the launcher) once every worker has
// written its ready file, i.e. once the launcher's handlers are in place.
std::thread signal_when_ready(const TemporaryFolder& folder, int workers, int signal) {
  return std::thread([&folder, workers, signal] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int rank = 0; rank < workers; ++rank)
      while (!std::filesystem::exists(folder.path() / ("ready" + std::to_string(rank))) &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::kill(::getpid(), signal);
  });
}

TEST_CASE("SIGTERM to the launcher stops the workers, exits 128+15 and restores the handler") {
  struct sigaction test_handler {}, before {}, after {};
  test_handler.sa_handler = ignore_test_signal;
  ::sigemptyset(&test_handler.sa_mask);
  ::sigaction(SIGTERM, &test_handler, &before);

  TemporaryFolder folder;
  ScriptRun run(2, "touch " + folder.path().string() + "/ready$RANK; sleep 1000");
  auto sender = signal_when_ready(folder, 2, SIGTERM);
  const auto result = run.run();
  sender.join();

  ::sigaction(SIGTERM, &before, &after);
  const bool handler_restored = after.sa_handler == ignore_test_signal;
  CHECK(handler_restored);
  CHECK(result.exit_code == 128 + SIGTERM);
  CHECK(result.failed_rank == -1);
  CHECK(result.failure == "interrupted by SIGTERM");
  for (const auto& worker : result.workers) {
    CHECK(worker.stopped_by_launcher);
    CHECK(worker.signal == SIGTERM);
  }
}

TEST_CASE("SIGINT to the launcher is passed on to the workers, which may end on their own") {
  struct sigaction test_handler {}, before {};
  test_handler.sa_handler = ignore_test_signal;
  ::sigemptyset(&test_handler.sa_mask);
  ::sigaction(SIGINT, &test_handler, &before);

  TemporaryFolder folder;
  // The trap runs once the foreground command ends. Short sleeps: a sleep
  // forked just as SIGINT arrives may miss it (the shell's child has not
  // reset its handlers yet), and must not keep the trap waiting.
  ScriptRun run(2, "trap 'echo \"$RANK got SIGINT\" >&2; exit 0' INT; touch " + folder.path().string() +
                       "/ready$RANK; while :; do sleep 0.05; done");
  auto sender = signal_when_ready(folder, 2, SIGINT);
  const auto result = run.run();
  sender.join();
  ::sigaction(SIGINT, &before, nullptr);

  const auto err = run.err.str();
  CAPTURE(err);
  CHECK(result.exit_code == 128 + SIGINT);
  CHECK(result.failure == "interrupted by SIGINT");
  CHECK(err.find("[rank 0] 0 got SIGINT\n") != std::string::npos);
  CHECK(err.find("[rank 1] 1 got SIGINT\n") != std::string::npos);
  for (const auto& worker : result.workers) CHECK(worker.description == "exited with status 0");
}

int grandchild_pid(const std::string& output) {
  const auto at = output.find("grandchild ");
  REQUIRE(at != std::string::npos);
  return std::stoi(output.substr(at + 11));
}

TEST_CASE("no grandchild outlives the launcher") {
  SUBCASE("one that holds the output pipe, after a successful run") {
    ScriptRun run(1, R"(sleep 1000 & echo "grandchild $!")");
    CHECK(run.run().exit_code == 0);
    CHECK(process_is_gone(grandchild_pid(run.out.str())));
  }
  SUBCASE("one with its output elsewhere, after a successful run") {
    ScriptRun run(1, R"(sleep 1000 >/dev/null 2>&1 & echo "grandchild $!")");
    CHECK(run.run().exit_code == 0);
    CHECK(process_is_gone(grandchild_pid(run.out.str())));
  }
  SUBCASE("one of a worker that failed") {
    ScriptRun run(2, R"(if [ "$RANK" = 0 ]; then sleep 1000 >/dev/null 2>&1 & echo "grandchild $!"; exit 4; fi; sleep 1000)");
    CHECK(run.run().failure == "rank 0 exited with status 4");
    CHECK(process_is_gone(grandchild_pid(run.out.str())));
  }
}

int read_pid_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  int pid = 0;
  in >> pid;
  return pid;
}

int parent_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  std::getline(in, text);
  // "pid (comm) state ppid ...": the fields after the last ')'.
  std::istringstream fields(text.substr(text.rfind(')') + 1));
  std::string state;
  int parent = 0;
  fields >> state >> parent;
  return parent;
}

TEST_CASE("workers die with a launcher that is killed") {
  // The launcher under test runs in the launch_workers helper, itself a
  // worker of this process's launcher; its own workers are in process groups
  // of their own, so only PR_SET_PDEATHSIG can end them.
  TemporaryFolder folder;
  const auto dir = folder.path().string();
  ScriptRun run(1, "");
  run.options.command_for = [&](int) {
    return WorkerCommand{{MESHRUN_LAUNCH_WORKERS_PROGRAM, "2", "/bin/sh", "-c",
                          "echo $$ > " + dir + "/pid$RANK.tmp; mv " + dir + "/pid$RANK.tmp " + dir +
                              "/pid$RANK; exec sleep 1000"},
                         {}};
  };
  int worker_pids[2] = {0, 0};
  std::thread killer([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (int rank = 0; rank < 2; ++rank) {
      const auto pid_file = folder.path() / ("pid" + std::to_string(rank));
      while (!std::filesystem::exists(pid_file) && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      worker_pids[rank] = read_pid_file(pid_file);
    }
    if (worker_pids[0] > 0) ::kill(parent_of(worker_pids[0]), SIGKILL);
  });
  const auto result = run.run();
  killer.join();
  CHECK(result.failure == "rank 0 was killed by signal 9 (SIGKILL)");
  REQUIRE(worker_pids[0] > 0);
  REQUIRE(worker_pids[1] > 0);
  CHECK(process_is_gone(worker_pids[0]));
  CHECK(process_is_gone(worker_pids[1]));
}

TEST_CASE("a last line without a newline is shown when the worker ends") {
  ScriptRun run(2, R"(if [ "$RANK" = 0 ]; then printf 'no newline'; else printf 'partial error' >&2; fi)");
  CHECK(run.run().exit_code == 0);
  CHECK(run.out.str() == "[rank 0] no newline\n");
  CHECK(run.err.str() == "[rank 1] partial error\n");
}

TEST_CASE("a line longer than 64 KiB is shown in pieces") {
  ScriptRun run(1, R"(head -c 150000 /dev/zero | tr '\0' x; echo; head -c 65536 /dev/zero | tr '\0' y; echo; echo next)");
  CHECK(run.run().exit_code == 0);
  const auto out = run.out.str();
  const std::string piece = "[rank 0] " + std::string(65536, 'x') + "\n";
  // A line of exactly 64 KiB is one line: its newline adds no empty one.
  CHECK(out == piece + piece + "[rank 0] " + std::string(150000 - 2 * 65536, 'x') + "\n" + "[rank 0] " +
                   std::string(65536, 'y') + "\n[rank 0] next\n");
}

TEST_CASE("a megabyte on stdout while another stream fills does not block the run") {
  // Both ranks write 1 MiB to stdout (rank 1's is read and dropped) and
  // 20000 lines to stderr; a launcher that blocked on one pipe would hang.
  ScriptRun run(2, R"(yes 0123456789abcdef | head -c 1048576 & yes "err $RANK" | head -n 20000 >&2; wait)");
  const auto start = std::chrono::steady_clock::now();
  const auto result = run.run();
  CHECK(elapsed_seconds(start) < 10);
  CHECK(result.exit_code == 0);
  const auto out = run.out.str();
  CHECK(count_lines(out) == 1048576 / 17 + 1);  // 17-byte lines, then a 16-byte partial one
  CHECK(out.size() == 1048576 + (1048576 / 17 + 1) * std::string("[rank 0] ").size() + 1);
  CHECK(out.find("[rank 1]") == std::string::npos);
  const auto err = run.err.str();
  CHECK(count_lines(err) == 40000);
}

TEST_CASE("the stdout a failed rank wrote while hidden is shown after all") {
  TemporaryFolder folder;
  ScriptRun run(2, R"(echo "loading $RANK"; if [ "$RANK" = 1 ]; then )" + wait_for(folder, "loaded") +
                       R"(echo "fatal: no such model"; exit 2; fi; )" + touch(folder, "loaded") + "sleep 1000");
  const auto result = run.run();
  CHECK(result.failure == "rank 1 exited with status 2");
  CHECK(run.out.str() == "[rank 0] loading 0\n");
  CHECK(run.err.str().find("[launcher] the last 2 line(s) rank 1 wrote to stdout, hidden while it ran:\n"
                           "[rank 1] loading 1\n[rank 1] fatal: no such model\n") != std::string::npos);
}

TEST_CASE("a worker that cannot start fails the run and stops those started") {
  SUBCASE("a path that does not exist") {
    ScriptRun run(1, "");
    run.options.command_for = [](int) { return WorkerCommand{{"/nonexistent/meshrun-worker"}, {}}; };
    const auto result = run.run();
    CHECK(result.exit_code == 1);
    CHECK(result.failed_rank == 0);
    CHECK(result.failure == "rank 0 could not start: cannot run /nonexistent/meshrun-worker: No such file or directory");
    CHECK(result.workers.empty());
  }
  SUBCASE("a name not on PATH, for rank 1") {
    ScriptRun run(2, "");
    run.options.command_for = [](int rank) {
      return rank == 0 ? WorkerCommand{{"/bin/sh", "-c", "sleep 1000"}, {}}
                       : WorkerCommand{{"meshrun-no-such-program"}, {}};
    };
    const auto start = std::chrono::steady_clock::now();
    const auto result = run.run();
    CHECK(elapsed_seconds(start) < 3);
    CHECK(result.failed_rank == 1);
    CHECK(result.failure == "rank 1 could not start: 'meshrun-no-such-program' was not found on PATH");
    REQUIRE(result.workers.size() == 1);
    CHECK(result.workers[0].stopped_by_launcher);
  }
}

TEST_CASE("options that make no sense are refused before anything starts") {
  LocalLaunchOptions options;
  options.command_for = [](int) { return WorkerCommand{{"/bin/true"}, {}}; };
  options.workers = 0;
  CHECK_THROWS_AS(run_local_workers(options), std::logic_error);
  options.workers = 1;
  options.stop_grace_seconds = -1;
  CHECK_THROWS_AS(run_local_workers(options), std::logic_error);
  options.stop_grace_seconds = 1;
  options.timeout_seconds = 0;
  CHECK_THROWS_AS(run_local_workers(options), std::logic_error);
  options.timeout_seconds.reset();
  options.command_for = [](int) { return WorkerCommand{}; };
  CHECK_THROWS_AS(run_local_workers(options), std::logic_error);
  options.command_for = nullptr;
  CHECK_THROWS_AS(run_local_workers(options), std::logic_error);
}

TEST_CASE("choose_free_port finds a port that can be bound, and port_is_free sees a listener") {
  const int port = choose_free_port("127.0.0.1");
  CHECK(port > 0);
  CHECK(port <= 65535);
  CHECK(port_is_free("127.0.0.1", port));

  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(listener, 1) == 0);
  CHECK_FALSE(port_is_free("127.0.0.1", port));
  CHECK_FALSE(port_is_free("0.0.0.0", port));
  ::close(listener);

  CHECK_THROWS_AS(choose_free_port("no-such-host.invalid"), LaunchError);
  CHECK_THROWS_AS(port_is_free("127.0.0.1", 0), std::logic_error);
}

TEST_CASE("this_executable_path names the test binary") {
  const std::filesystem::path path = this_executable_path();
  CHECK(path.is_absolute());
  CHECK(path.filename() == "unit_tests");
}

}  // namespace
}  // namespace meshrun
