// Actor → rollout engine weight sync with real processes: after
// send_weights_to_engines, a tensor-parallel engine on other ranks gives the
// actor's logits (tests/rl/programs/ppo_sync_worker.cpp).
#include <doctest/doctest.h>

#include <regex>

#include "support/worker_process.hpp"
#include "test_program_paths.hpp"

TEST_CASE("after the sync, a tp 2 engine on other ranks gives the updated actor's logits") {
  const int port = meshrun::test::free_loopback_port();
  std::vector<std::unique_ptr<meshrun::test::WorkerProcess>> ranks;
  for (int rank = 0; rank < 3; ++rank)
    ranks.push_back(std::make_unique<meshrun::test::WorkerProcess>(
        std::vector<std::string>{MESHRUN_PPO_SYNC_WORKER_PROGRAM, std::to_string(rank), std::to_string(port), "60000"}));
  for (auto& rank : ranks) REQUIRE_MESSAGE(rank->wait(std::chrono::seconds(90)) == 0, rank->output());
  std::smatch match;
  const std::string output = ranks[1]->output();
  REQUIRE_MESSAGE(std::regex_search(output, match, std::regex("before ([0-9.e+-]+) after ([0-9.e+-]+)")), output);
  CHECK(std::stod(match[1]) > 1e-3);  // the engine started elsewhere
  CHECK(std::stod(match[2]) < 1e-5);
}
