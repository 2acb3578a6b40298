// Sequence parallelism with real processes: 2 and 4 ranks over Gloo on
// loopback (tests/model/programs/sp_model_worker) compare the sp model with
// the whole-sequence model of the same seed: outputs of each rank's columns
// and gradients summed over sp within 1e-5, for GQA, biases, a sliding
// window, a value head, packing, padding and checkpointing.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "test_program_paths.hpp"
#include "support/worker_process.hpp"

namespace {

void run_ranks(int world) {
  const int port = meshrun::test::free_loopback_port();
  std::vector<std::unique_ptr<meshrun::test::WorkerProcess>> ranks;
  for (int rank = 0; rank < world; ++rank)
    ranks.push_back(std::make_unique<meshrun::test::WorkerProcess>(std::vector<std::string>{
        MESHRUN_SP_MODEL_WORKER_PROGRAM, std::to_string(rank), std::to_string(world), std::to_string(port), "60000"}));
  for (auto& rank : ranks) {
    CHECK_MESSAGE(rank->wait(std::chrono::seconds(120)) == 0, rank->output());
    const std::string output = rank->output();
    CHECK_MESSAGE(output.find(" ok variant 0 outputs ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 5 outputs ") != std::string::npos, output);  // the Phi-3 critic
    CHECK_MESSAGE(output.find("; variant 0 checkpointed outputs ") != std::string::npos, output);
  }
}

}  // namespace

TEST_CASE("sp=2 over Gloo equals the whole sequence: outputs and gradients within 1e-5") { run_ranks(2); }

TEST_CASE("sp=4 over Gloo equals the whole sequence: outputs and gradients within 1e-5") { run_ranks(4); }
