// Tensor parallelism with real processes: two ranks over Gloo on loopback
// (tests/model/programs/model_worker) compare the tp=2 model with the tp=1
// model of the same seed: logits, vocab-parallel cross-entropy, log-probs
// and gathered gradients within 1e-5 (mixtures of experts with their
// load-balancing loss), save and reload; and expert parallelism over the
// same two ranks against every expert on each (model_worker's
// check_expert_parallel).
#include "tests/dist/torch_doctest.hpp"

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "meshrun/model/safetensors.hpp"
#include "model_fixtures.hpp"
#include "test_program_paths.hpp"
#include "support/worker_process.hpp"

namespace {


class Rank : public meshrun::test::WorkerProcess {
 public:
  Rank(int rank, int world, int port, const std::string& directory)
      : WorkerProcess({MESHRUN_MODEL_WORKER_PROGRAM, std::to_string(rank), std::to_string(world),
                       std::to_string(port), "60000", directory}) {}
};

}  // namespace

TEST_CASE("tp=2 over Gloo equals tp=1: logits, cross-entropy, log-probs and gradients within 1e-5") {
  model_test::TempDir dir;
  const int port = meshrun::test::free_loopback_port();
  Rank rank0(0, 2, port, dir.path().string());
  Rank rank1(1, 2, port, dir.path().string());
  CHECK_MESSAGE(rank0.wait(std::chrono::seconds(90)) == 0, rank0.output());
  CHECK_MESSAGE(rank1.wait(std::chrono::seconds(30)) == 0, rank1.output());
  for (const Rank* rank : {&rank0, &rank1}) {
    const std::string output = rank->output();
    CHECK_MESSAGE(output.find(" ok variant 0 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 1 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 2 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 3 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 4 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 5 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 6 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 6 checkpointed logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 7 logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 7 checkpointed logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; expert parallel logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; expert parallel checkpointed logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 0 checkpointed logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; variant 4 checkpointed logits ") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; generation equal on 6 samples") != std::string::npos, output);
    CHECK_MESSAGE(output.find("; fused head ") != std::string::npos, output);
  }
  // The split model was saved as full Hugging Face tensors.
  CHECK(std::filesystem::exists(dir.file("variant-0/model.safetensors")));
  CHECK(std::filesystem::exists(dir.file("variant-1/config.json")));
  CHECK(std::filesystem::exists(dir.file("variant-2/config.json")));
  // Phi-3's: fused at their full shapes (q 32 + k, v 2 × 16 rows; gate, up 2 × 48), not per rank.
  const meshrun::SafetensorsFile phi3(dir.file("variant-3/model.safetensors"));
  REQUIRE(phi3.find("model.layers.1.self_attn.qkv_proj.weight"));
  CHECK(phi3.find("model.layers.1.self_attn.qkv_proj.weight")->shape == std::vector<int64_t>{64, 32});
  CHECK(phi3.find("model.layers.0.mlp.gate_up_proj.weight")->shape == std::vector<int64_t>{96, 32});
  CHECK_FALSE(phi3.find("model.layers.0.self_attn.k_proj.weight"));
  // The mixtures' experts at full width, under transformers' names.
  const meshrun::SafetensorsFile qwen3_moe(dir.file("variant-4/model.safetensors"));
  REQUIRE(qwen3_moe.find("model.layers.0.mlp.experts.3.down_proj.weight"));
  CHECK(qwen3_moe.find("model.layers.0.mlp.experts.3.down_proj.weight")->shape == std::vector<int64_t>{32, 16});
  CHECK(qwen3_moe.find("model.layers.0.mlp.gate.weight")->shape == std::vector<int64_t>{4, 32});
  CHECK(qwen3_moe.find("model.layers.1.mlp.gate_proj.weight")->shape == std::vector<int64_t>{48, 32});
  const meshrun::SafetensorsFile mixtral(dir.file("variant-5/model.safetensors"));
  REQUIRE(mixtral.find("model.layers.1.block_sparse_moe.experts.2.w1.weight"));
  CHECK(mixtral.find("model.layers.1.block_sparse_moe.experts.2.w2.weight")->shape == std::vector<int64_t>{32, 24});
}
