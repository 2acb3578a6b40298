// Resharding with real processes on Gloo: two ranks of
// tests/train/programs/reshard_worker save builtin:tiny's training state
// under one layout (one process, dp 2 at every ZeRO stage, tp 2) and load it
// into every other (and into other bucket sizes). The reassembled state must
// equal the gathered one bit for bit, the loaded engine must hold exactly
// it, and the next step must match the source's own next step; checkpoints
// missing a dp or tp rank's file are refused.
#include <doctest/doctest.h>

#include <chrono>
#include <map>
#include <sstream>
#include <string>

#include "support/temp_dir.hpp"
#include "support/worker_process.hpp"
#include "test_program_paths.hpp"

namespace meshrun {
namespace {

using namespace std::chrono_literals;

class ReshardWorker : public test::WorkerProcess {
 public:
  ReshardWorker(int rank, int port, const std::string& directory)
      : WorkerProcess({MESHRUN_RESHARD_WORKER_PROGRAM, std::to_string(rank), "2", std::to_string(port), "60000",
                       directory},
                      {{"OMP_NUM_THREADS", "1"}}) {}
};

struct Outcome {
  int assembled_equal = -1, loaded_equal = -1;
  double loss_rel_diff = -1, weight_rel_diff = -1;
};

TEST_CASE("a training state saved under one layout loads into every other, exactly") {
  test::TempDir temp;
  const int port = test::free_loopback_port();
  ReshardWorker rank0(0, port, temp.path().string()), rank1(1, port, temp.path().string());
  const int status0 = rank0.wait(240s);
  const int status1 = rank1.wait(20s);
  REQUIRE_MESSAGE(status0 == 0, rank0.output());
  REQUIRE_MESSAGE(status1 == 0, rank1.output());

  std::map<std::string, Outcome> outcomes;
  std::map<std::string, std::string> refusals;
  std::istringstream lines(rank0.output());
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string word, source, target;
    fields >> word;
    if (word == "reshard") {
      Outcome outcome;
      fields >> source >> target >> word >> outcome.assembled_equal >> word >> outcome.loaded_equal >> word >>
          outcome.loss_rel_diff >> word >> outcome.weight_rel_diff;
      outcomes[source + " -> " + target] = outcome;
    } else if (word == "refused") {
      fields >> source;
      std::getline(fields, refusals[source]);
    }
  }
  INFO(rank0.output());
  const char* layouts[] = {"single", "dp2", "dp2_zero1", "dp2_zero2", "dp2_zero3", "tp2"};
  for (const char* source : layouts)
    for (const std::string target :
         {"single", "dp2", "dp2_zero1", "dp2_zero2", "dp2_zero3", "tp2", "dp2_zero2_bucket1mb"}) {
      const std::string name = std::string(source) + " -> " + target;
      CAPTURE(name);
      REQUIRE(outcomes.count(name));
      const Outcome& outcome = outcomes.at(name);
      CHECK(outcome.assembled_equal == 1);
      CHECK(outcome.loaded_equal == 1);
      // The next step differs from the source's only by the summation order
      // of another layout (the tolerance of multiprocess_train_test.cpp).
      CHECK(outcome.loss_rel_diff >= 0);
      CHECK(outcome.loss_rel_diff < 1e-5);
      CHECK(outcome.weight_rel_diff >= 0);
      CHECK(outcome.weight_rel_diff < 1e-5);
    }
  REQUIRE(refusals.count("dp2_zero2_without_rank1"));
  CHECK(refusals.at("dp2_zero2_without_rank1").find("are in no rank file") != std::string::npos);
  REQUIRE(refusals.count("dp2_zero2_only_dp_rank1"));
  CHECK(refusals.at("dp2_zero2_only_dp_rank1").find("are in no rank file") != std::string::npos);
  REQUIRE(refusals.count("tp2_without_rank1"));
  CHECK(refusals.at("tp2_without_rank1").find("no rank file holds tp rank 1 of 2") != std::string::npos);
}

}  // namespace
}  // namespace meshrun
