// Store-level rendezvous: rank claims, arrivals, and job isolation.
#include "torch_doctest.hpp"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "src/dist/rendezvous.hpp"
#include "src/dist/store_server.hpp"
#include "tests/dist/store_test_support.hpp"

namespace meshrun::dist_detail {
namespace {

using namespace std::chrono_literals;

TEST_CASE("job keys live under meshrun/<job id>, else under the master endpoint") {
  CHECK(job_keys_for("slurm-123", "10.0.0.1:29500").arrived(3) == "meshrun/slurm-123/arrived/3");
  CHECK(job_keys_for("", "10.0.0.1:29500").heartbeat(0) == "meshrun/10.0.0.1:29500/heartbeat/0");
  CHECK(job_keys_for("j", "m:1").group("actor/dp/1") == "meshrun/j/pg/actor/dp/1");
}

TEST_CASE("a rank is claimed once; a second claimant is told who holds it") {
  StoreServer server("127.0.0.1", 0, "");
  auto first = test::rank_client(server, 1);
  auto second = test::rank_client(server, 1);
  const JobKeys keys = job_keys_for("job", "m:1");
  claim_rank(*first, keys, 1, "node-a pid 10");
  const std::string error = test::dist_error_of([&] { claim_rank(*second, keys, 1, "node-b pid 20"); });
  CHECK(error.find("rank 1 of job meshrun/job is already held by node-a pid 10") != std::string::npos);
  CHECK(error.find("MESHRUN_JOB_ID") != std::string::npos);
  // The same rank of another job is free.
  claim_rank(*second, job_keys_for("other", "m:1"), 1, "node-b pid 20");
}

TEST_CASE("waiting for arrivals names the ranks that never came") {
  StoreServer server("127.0.0.1", 0, "");
  auto store = test::rank_client(server, 0);
  const JobKeys keys = job_keys_for("job", "m:1");
  announce_arrival(*store, keys, 0, "a");
  announce_arrival(*store, keys, 1, "b");
  const auto start = Clock::now();
  const std::string error =
      test::dist_error_of([&] { wait_for_arrivals(*store, keys, 4, Clock::now() + 300ms, 10s, "127.0.0.1:29500"); });
  CHECK(error == "rendezvous timed out after 10 s: ranks 2, 3 of 4 never arrived (master 127.0.0.1:29500)");
  CHECK(std::chrono::duration<double>(Clock::now() - start).count() < 2);
  announce_arrival(*store, keys, 2, "c");
  announce_arrival(*store, keys, 3, "d");
  wait_for_arrivals(*store, keys, 4, Clock::now() + 300ms, 10s, "127.0.0.1:29500");
}

TEST_CASE("every rank runs rank 0's recipe, or all fail naming the ranks and keys that differ") {
  StoreServer server("127.0.0.1", 0, "");
  const std::string ours = "algorithm = \"sft\"\nroles.actor.model = \"builtin:tiny\"\nbatch.micro_train = 2\n";
  const std::string theirs = "algorithm = \"sft\"\nroles.actor.model = \"builtin:tiny-qwen3\"\nbatch.micro_train = 2\n";
  // recipes[r]: rank r's; the verdict every rank reaches ("ok" or its error).
  const auto agree = [&](const std::string& job, const std::vector<std::string>& recipes) {
    const JobKeys keys = job_keys_for(job, "m:1");
    const int world = static_cast<int>(recipes.size());
    std::vector<std::string> verdicts(recipes.size());
    std::vector<std::thread> ranks;
    for (int rank = 0; rank < world; ++rank)
      ranks.emplace_back([&, rank] {
        auto store = test::rank_client(server, rank);
        publish_recipe(*store, keys, rank, recipes[static_cast<size_t>(rank)]);
        announce_arrival(*store, keys, rank, "r" + std::to_string(rank));
        wait_for_arrivals(*store, keys, world, Clock::now() + 5s, 5s, "m:1");
        const std::string error = test::dist_error_of(
            [&] { agree_on_recipe(*store, keys, rank, world, recipes[static_cast<size_t>(rank)], Clock::now() + 5s); });
        verdicts[static_cast<size_t>(rank)] = error == "(no error)" ? "ok" : error;
      });
    for (auto& rank : ranks) rank.join();
    return verdicts;
  };
  for (const std::string& verdict : agree("same", {ours, ours, ours})) CHECK(verdict == "ok");
  const auto differ = agree("differ", {ours, ours, theirs, theirs});
  for (const std::string& verdict : differ) {
    CHECK(verdict == differ.front());  // all fail alike
    CHECK(verdict.find("ranks 2, 3 of 4 resolved another than rank 0's") != std::string::npos);
    CHECK(verdict.find("roles.actor.model \"builtin:tiny-qwen3\" against rank 0's \"builtin:tiny\"") !=
          std::string::npos);
  }
  // A process that runs no recipe is not checked.
  for (const std::string& verdict : agree("none", {"", ""})) CHECK(verdict == "ok");
}

TEST_CASE("two jobs on one store never see each other's arrivals") {
  StoreServer server("127.0.0.1", 0, "");
  auto store = test::rank_client(server, 0);
  const JobKeys job_a = job_keys_for("a", "m:1"), job_b = job_keys_for("b", "m:1");
  announce_arrival(*store, job_a, 0, "x");
  announce_arrival(*store, job_a, 1, "x");
  wait_for_arrivals(*store, job_a, 2, Clock::now() + 300ms, 1s, "m:1");
  announce_arrival(*store, job_b, 0, "y");
  CHECK(test::dist_error_of([&] { wait_for_arrivals(*store, job_b, 2, Clock::now() + 200ms, 1s, "m:1"); })
            .find("rank 1 of 2 never arrived") != std::string::npos);
}

TEST_CASE("the missing-arrival message reads naturally for one and for several") {
  CHECK(format_missing_arrivals({3}, 4, 5s, "h:1") == "rendezvous timed out after 5 s: rank 3 of 4 never arrived (master h:1)");
  CHECK(format_missing_arrivals({1, 2}, 3, 1500ms, "[::1]:2") ==
        "rendezvous timed out after 1.5 s: ranks 1, 2 of 3 never arrived (master [::1]:2)");
}

}  // namespace
}  // namespace meshrun::dist_detail
