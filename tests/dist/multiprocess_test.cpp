// Real jobs of 2-4 processes on 127.0.0.1 (tests/dist/programs/dist_worker):
// meeting, the self-check over a dp=2 tp=2 mesh, and the failures a user
// meets: a rank that never comes, a rank killed or stopped mid-collective,
// one busy outside the collectives, one whose heartbeat is lost while it
// works on, a process with the wrong job token, a taken port.
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "test_program_paths.hpp"
#include "support/worker_process.hpp"

namespace meshrun {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;


// Whether the self-check report has a line "  NAME  ranks MEMBERS  ok: <all ops>".
bool report_has_group(const std::string& report, const std::string& name, const std::string& members) {
  std::istringstream lines(report);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string group, ranks_word, ranks, ok;
    fields >> group >> ranks_word >> ranks >> ok;
    std::string ops;
    std::getline(fields, ops);
    if (group == name && ranks_word == "ranks" && ranks == members && ok == "ok:" &&
        ops.find(" barrier all_reduce all_gather broadcast ") == 0)
      return true;
  }
  return false;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

class Worker : public test::WorkerProcess {
 public:
  Worker(const std::string& scenario, int rank, int world, int port, int timeout_ms,
         const std::map<std::string, std::string>& environment = {})
      : WorkerProcess({MESHRUN_DIST_WORKER_PROGRAM, scenario, std::to_string(rank), std::to_string(world),
                       std::to_string(port), std::to_string(timeout_ms)},
                      environment) {}
};

// Starts `world` ranks of `scenario` and waits until each has printed "ready RANK".
std::vector<std::unique_ptr<Worker>> start_ready(const std::string& scenario, int world, int port, int timeout_ms) {
  std::vector<std::unique_ptr<Worker>> ranks;
  for (int rank = 0; rank < world; ++rank)
    ranks.push_back(std::make_unique<Worker>(scenario, rank, world, port, timeout_ms));
  for (int rank = 0; rank < world; ++rank) {
    Worker& worker = *ranks[static_cast<size_t>(rank)];
    REQUIRE_MESSAGE(worker.wait_for_output("ready " + std::to_string(rank), 30s), worker.output());
  }
  return ranks;
}

TEST_CASE("two ranks meet even when rank 0 starts last, and pass the self-check") {
  const int port = test::free_loopback_port();
  Worker rank1("check", 1, 2, port, 20000);
  std::this_thread::sleep_for(400ms);
  Worker rank0("check", 0, 2, port, 20000);
  CHECK_MESSAGE(rank0.wait(40s) == 0, rank0.output());
  CHECK_MESSAGE(rank1.wait(10s) == 0, rank1.output());
  const std::string report = rank0.output();
  CHECK(report.find("world of 2 on cpu with gloo") != std::string::npos);
  CHECK_MESSAGE(report_has_group(report, "world", "0,1"), report);
  CHECK_MESSAGE(report_has_group(report, "actor/dp", "0,1"), report);
  CHECK_MESSAGE(report_has_group(report, "actor/tp", "1"), report);
  CHECK(report.find("all passed") != std::string::npos);
  CHECK(rank1.output().find("rank 1 ok") != std::string::npos);
}

TEST_CASE("four ranks check the world and every axis group of a dp=2 tp=2 mesh") {
  const int port = test::free_loopback_port();
  std::vector<std::unique_ptr<Worker>> ranks;
  for (int rank = 0; rank < 4; ++rank) ranks.push_back(std::make_unique<Worker>("check", rank, 4, port, 20000));
  for (auto& rank : ranks) CHECK_MESSAGE(rank->wait(50s) == 0, rank->output());
  const std::string report = ranks[0]->output();
  auto has_group = [&](const std::string& name, const std::string& members) {
    return report_has_group(report, name, members);
  };
  CHECK_MESSAGE(has_group("world", "0,1,2,3"), report);
  CHECK_MESSAGE(has_group("actor", "0,1,2,3"), report);
  CHECK_MESSAGE(has_group("actor/dp", "0,2"), report);
  CHECK_MESSAGE(has_group("actor/dp", "1,3"), report);
  CHECK_MESSAGE(has_group("actor/tp", "0,1"), report);
  CHECK_MESSAGE(has_group("actor/tp", "2,3"), report);
  CHECK_MESSAGE(has_group("actor/sp", "3"), report);
  CHECK(report.find("10 groups checked, all passed") != std::string::npos);
}

TEST_CASE("the helpers agree across ranks of a job faked as two nodes") {
  const int port = test::free_loopback_port();
  Worker rank0("helpers", 0, 2, port, 20000);
  Worker rank1("helpers", 1, 2, port, 20000);
  CHECK_MESSAGE(rank0.wait(30s) == 0, rank0.output());
  CHECK_MESSAGE(rank1.wait(10s) == 0, rank1.output());
  // One rank per node at a time: rank 0 in the first wave, rank 1 in the
  // second. Both nodes see /tmp, so the filesystem counts as shared.
  CHECK_MESSAGE(rank0.output().find("rank 0 sum 3 max 0.5 sync 'from rank 0' flag 1 gathered x xx turn 0 nodes 2 "
                                    "local_rank 0 fs_local_rank 0 all_to_all routed") != std::string::npos,
                rank0.output());
  CHECK_MESSAGE(rank1.output().find("rank 1 sum 3 max 0.5 sync 'from rank 0' flag 1 gathered x xx turn 1 nodes 2 "
                                    "local_rank 0 fs_local_rank 1 all_to_all routed") != std::string::npos,
                rank1.output());
}

TEST_CASE("a rank that never arrives: the others fail within the timeout, naming it") {
  const int port = test::free_loopback_port();
  const auto start = Clock::now();
  Worker rank0("loop", 0, 3, port, 3000);
  Worker rank1("loop", 1, 3, port, 3000);
  CHECK(rank0.wait(15s) == 1);
  CHECK(rank1.wait(5s) == 1);
  CHECK(seconds_since(start) < 10);
  const std::string expected = "rendezvous timed out after 3 s: rank 2 of 3 never arrived (master 127.0.0.1:" +
                               std::to_string(port) + ")";
  CHECK_MESSAGE(rank0.output().find(expected) != std::string::npos, rank0.output());
  CHECK_MESSAGE(rank1.output().find(expected) != std::string::npos, rank1.output());
}

TEST_CASE("a rank killed (kill -9) or stopped (SIGSTOP) mid-collective: the others exit within the timeout, naming it") {
  // A killed rank's sockets close at once; a stopped one's only go quiet.
  for (const auto& [signal, slack] : {std::pair{SIGKILL, 2}, std::pair{SIGSTOP, 3}}) {
    CAPTURE(signal);
    const int port = test::free_loopback_port();
    auto ranks = start_ready("loop", 3, port, 5000);
    const auto signalled_at = Clock::now();
    ranks[2]->signal(signal);
    for (int rank = 0; rank < 2; ++rank) {
      Worker& survivor = *ranks[static_cast<size_t>(rank)];
      CHECK(survivor.wait(15s) == 1);
      const std::string output = survivor.output();
      CHECK_MESSAGE(output.find("all_reduce on group world (ranks 0, 1, 2)") != std::string::npos, output);
      // What it was doing when last heard of depends on the moment it stopped.
      CHECK_MESSAGE(output.find("rank 2 (actor, ") != std::string::npos, output);
      CHECK_MESSAGE(output.find(" on group world) stopped responding (last heartbeat") != std::string::npos, output);
    }
    CHECK(seconds_since(signalled_at) < 5 + slack);
    // The destructor's SIGKILL ends a stopped process too.
  }
}

TEST_CASE("a rank busy outside the collectives: the others time out naming it and what it did last") {
  const int port = test::free_loopback_port();
  auto ranks = start_ready("busy", 3, port, 4000);
  const auto since = Clock::now();
  for (int rank : {1, 0}) {
    Worker& survivor = *ranks[static_cast<size_t>(rank)];
    CHECK(survivor.wait(15s) == 1);
    const std::string output = survivor.output();
    CHECK_MESSAGE(output.find("all_reduce on group world (ranks 0, 1, 2) timed out after 4 s: every other member "
                              "still responds") != std::string::npos,
                  output);
    CHECK_MESSAGE(output.find("but rank 2 (actor, after all_reduce on group world) is not in this all_reduce") !=
                      std::string::npos,
                  output);
    // Rank 0 hosts the store and keeps it up for the others for at most
    // another timeout (rank 2 is alive): a launcher stops it sooner.
    CHECK(seconds_since(since) < (rank == 1 ? 4 + 3 : 2 * 4 + 3));
  }
}

TEST_CASE("a live rank whose heartbeat is lost: every other rank stops within the timeout, naming it") {
  const int port = test::free_loopback_port();
  auto ranks = start_ready("deaf", 3, port, 4000);
  const auto since = Clock::now();
  int refused = 0;
  for (int rank = 0; rank < 2; ++rank) {
    Worker& survivor = *ranks[static_cast<size_t>(rank)];
    CHECK(survivor.wait(15s) == 1);
    const std::string output = survivor.output();
    // The first to see the silence refuses its next collective; a rank in
    // that collective with it then fails, blaming the same silent rank.
    if (output.find("all_reduce on group world (ranks 0, 1, 2) not started: rank 2 (actor, ") != std::string::npos &&
        output.find("longer than the timeout of 4 s") != std::string::npos)
      ++refused;
    CHECK_MESSAGE(output.find("rank 2 (actor, ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("stopped responding (last heartbeat") != std::string::npos, output);
  }
  CHECK(refused >= 1);
  // The deaf rank itself fails once the others have left.
  CHECK(ranks[2]->wait(15s) == 1);
  CHECK(seconds_since(since) < 4 + 6);
}

TEST_CASE("kill -9 of rank 0: the others say the store host is gone") {
  const int port = test::free_loopback_port();
  auto ranks = start_ready("loop", 3, port, 5000);
  const auto killed_at = Clock::now();
  ranks[0]->kill_now();
  for (int rank = 1; rank < 3; ++rank) {
    Worker& survivor = *ranks[static_cast<size_t>(rank)];
    CHECK(survivor.wait(15s) == 1);
    CHECK_MESSAGE(survivor.output().find("rank 0 (the store host at 127.0.0.1:" + std::to_string(port) +
                                         ") is gone") != std::string::npos,
                  survivor.output());
  }
  CHECK(seconds_since(killed_at) < 5 + 2);
}

TEST_CASE("a process with the wrong job token is refused and the job completes") {
  const int port = test::free_loopback_port();
  const std::map<std::string, std::string> right{{"MESHRUN_JOB_TOKEN", "right"}};
  Worker rank0("check", 0, 2, port, 20000, right);
  Worker intruder("check", 1, 2, port, 20000, {{"MESHRUN_JOB_TOKEN", "wrong"}});
  CHECK(intruder.wait(20s) == 1);
  CHECK_MESSAGE(intruder.output().find("job token mismatch") != std::string::npos, intruder.output());
  Worker rank1("check", 1, 2, port, 20000, right);
  CHECK_MESSAGE(rank0.wait(30s) == 0, rank0.output());
  CHECK_MESSAGE(rank1.wait(10s) == 0, rank1.output());
  CHECK(rank0.output().find("all passed") != std::string::npos);
}

TEST_CASE("a port in use is an immediate, clear error on rank 0") {
  const int taken = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(taken, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(::listen(taken, 1) == 0);
  socklen_t length = sizeof address;
  ::getsockname(taken, reinterpret_cast<sockaddr*>(&address), &length);
  const int port = ntohs(address.sin_port);
  const auto start = Clock::now();
  Worker rank0("check", 0, 2, port, 20000);
  CHECK(rank0.wait(15s) == 1);
  CHECK(seconds_since(start) < 6);  // process start included; far from the 20 s timeout
  CHECK_MESSAGE(rank0.output().find("rank 0 cannot listen on 127.0.0.1:" + std::to_string(port) +
                                    " for the rendezvous: Address already in use") != std::string::npos,
                rank0.output());
  ::close(taken);
}

}  // namespace
}  // namespace meshrun
