// The model families against transformers itself: tests/model/transformers_parity.py
// builds tiny random models with transformers' own classes and save_pretrained
// (OLMo 2: post-norms, q/k norms over the whole projections, grouped kv
// heads, norm weights away from 1), with their fp32 logits and a greedy
// decode by transformers' generate. meshrun loads each directory: logits
// within 1e-5, the same greedy tokens from its engine, and the model it
// writes back loads in transformers with the same logits. (OLMo 2 at tp 2:
// the plan's mesh.qk-norm-tp, tests/plan/plan_test.cpp.) The mixtures of
// experts (Qwen3-MoE with a dense layer, Mixtral with a window shorter than
// the text, OLMoE with clip_qkv) also match transformers' load-balancing
// loss.
#include "tests/dist/torch_doctest.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "meshrun/error.hpp"
#include "meshrun/arch/model_config.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/rollout/generation.hpp"
#include "model_fixtures.hpp"

using namespace meshrun;

namespace {

std::string python_command(const std::string& arguments, const std::string& log) {
  return std::string(MESHRUN_TORCH_PYTHON) + " " + MESHRUN_SOURCE_DIR + "/tests/model/transformers_parity.py " +
         arguments + " > " + log + " 2>&1";
}

std::string read_log(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The cases, written once per test run.
const model_test::TempDir& parity_cases() {
  static model_test::TempDir dir;
  static const bool written =
      std::system(python_command("write " + dir.path().string(), dir.file("python.log")).c_str()) == 0;
  if (!written) FAIL("transformers_parity.py failed:\n" << read_log(dir.file("python.log")));
  return dir;
}

// Loads CASE (a directory the script wrote): logits within 1e-5, the same
// greedy tokens from the engine, the router's load-balancing loss where the
// case has one, and what meshrun writes back loads in transformers as
// `architecture` with the same logits.
void check_case(const std::string& name, const std::string& architecture) {
  const model_test::TempDir& cases = parity_cases();
  const std::string folder = cases.file(name);
  LlamaModel model = load_hf_model(folder, ModelOptions{});
  SafetensorsFile expected(folder + "/expected.safetensors");
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward({expected.load("input_ids"), {}, {}, {}});
  const double difference = (logits - expected.load("logits")).abs().max().item<double>();
  CAPTURE(difference);
  CHECK(difference <= 1e-5);
  if (model->config().mixture_of_experts()) {
    const RouterStats stats = model->router_stats();
    REQUIRE(stats.aux_loss.defined());
    const double aux = stats.aux_loss.item<double>(), want = expected.load("aux_loss").item<double>();
    CAPTURE(aux);
    CAPTURE(want);
    CHECK(std::abs(aux - want) <= 1e-5);
    CHECK(stats.expert_load_max.item<double>() >= 1.0);
  }

  const torch::Tensor prompt = expected.load("prompt"), greedy = expected.load("greedy");
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t row = 0; row < prompt.size(0); ++row) {
    std::vector<int32_t> ids;
    for (int64_t t = 0; t < prompt.size(1); ++t) ids.push_back(static_cast<int32_t>(prompt[row][t].item<int64_t>()));
    prompts.push_back(ids);
  }
  SamplingOptions options;
  options.temperature = 0;
  options.max_new_tokens = greedy.size(1);
  Generator generator(model, nullptr, 2, 64);
  const auto samples = generator.generate(prompts, options);
  for (size_t row = 0; row < samples.size(); ++row) {
    std::vector<int32_t> want;
    for (int64_t t = 0; t < greedy.size(1); ++t)
      want.push_back(static_cast<int32_t>(greedy[static_cast<int64_t>(row)][t].item<int64_t>()));
    CHECK(samples[row].response == want);
  }

  // Written back by meshrun: transformers reads it as the same family, same logits.
  const std::string written = cases.file(name + "-written");
  save_hf_model(written, model);
  const std::string log = cases.file(name + "-check.log");
  const int status =
      std::system(python_command("check " + written + " " + folder + "/expected.safetensors", log).c_str());
  CAPTURE(read_log(log));
  CHECK(status == 0);
  CHECK(read_log(log).find(architecture + "ForCausalLM") != std::string::npos);
}

}  // namespace

TEST_CASE("OLMo 2: logits and greedy decode equal transformers', and what meshrun writes loads in transformers") {
  check_case("olmo2", "Olmo2");
  const ModelConfig config = read_model_config(parity_cases().file("olmo2") + "/config.json");
  CHECK(config.family == ModelFamily::olmo2);
  CHECK(config.post_norms);
  CHECK(config.qk_norm_full_width);
}

TEST_CASE("Qwen3-MoE: a dense layer among sparse ones, top-2 renormalised: logits, decode and aux loss equal transformers'") {
  check_case("qwen3_moe", "Qwen3Moe");
  const ModelConfig config = read_model_config(parity_cases().file("qwen3_moe") + "/config.json");
  CHECK(config.family == ModelFamily::qwen3_moe);
  CHECK(config.experts == 4);  // written by transformers 5 as num_local_experts
  CHECK(config.expert_intermediate == 32);
  CHECK(config.norm_topk_prob);
  CHECK(config.sparse_layer(0));
  CHECK_FALSE(config.sparse_layer(1));
  CHECK(config.sparse_layers() == 2);
}

TEST_CASE("Mixtral: block_sparse_moe experts and a window shorter than the text: logits, decode and aux loss equal transformers'") {
  check_case("mixtral", "Mixtral");
  const ModelConfig config = read_model_config(parity_cases().file("mixtral") + "/config.json");
  CHECK(config.family == ModelFamily::mixtral);
  CHECK(config.sliding_window == 8);
  CHECK(config.norm_topk_prob);  // Mixtral always renormalises
}

TEST_CASE("Gemma 2: soft-capping, alternating windows, sandwich norms, GeGLU: logits and decode equal transformers'") {
  check_case("gemma2", "Gemma2");
  const ModelConfig config = read_model_config(parity_cases().file("gemma2") + "/config.json");
  CHECK(config.family == ModelFamily::gemma2);
  CHECK(config.attn_softcap == 2.0);
  CHECK(config.final_softcap == 3.0);
  CHECK(config.mixed_windows());
  CHECK(config.windowed(0));
  CHECK_FALSE(config.windowed(1));
  CHECK(config.hidden_act == "gelu_pytorch_tanh");
  CHECK(config.tied_embeddings);
}

TEST_CASE("Gemma 3: local and global layers with their own rotary bases, q/k norms: logits and decode equal transformers'") {
  check_case("gemma3_text", "Gemma3");
  const ModelConfig config = read_model_config(parity_cases().file("gemma3_text") + "/config.json");
  CHECK(config.family == ModelFamily::gemma3_text);
  CHECK(config.rope_theta == 1e6);
  CHECK(config.rope_scaling.type == RopeScaling::Type::linear);
  CHECK(config.window_rope_theta == 10000);
  CHECK(config.qk_norm);
  CHECK(config.attn_softcap == 0);
  CHECK(config.windowed(3));
  CHECK_FALSE(config.windowed(2));
}

TEST_CASE("OLMoE: top-3 of 4 not renormalised, clip_qkv, full-width q/k norms: logits, decode and aux loss equal transformers'") {
  check_case("olmoe", "Olmoe");
  const ModelConfig config = read_model_config(parity_cases().file("olmoe") + "/config.json");
  CHECK(config.family == ModelFamily::olmoe);
  CHECK(config.clip_qkv == 1.0);
  CHECK_FALSE(config.norm_topk_prob);
  CHECK(config.qk_norm_full_width);
}

TEST_CASE("OLMo 2's layers: post-norms, no input norm, q/k norms as wide as q and k") {
  ModelOptions options;
  options.config = model_test::small_config();
  options.config.family = ModelFamily::olmo2;
  apply_family_layout(options.config);
  LlamaModel single(options);  // tp 1 builds
  CHECK(single->parameters().size() > 0);
  auto names = single->named_parameters();
  CHECK(names.contains("model.layers.0.post_feedforward_layernorm.weight"));
  CHECK_FALSE(names.contains("model.layers.0.input_layernorm.weight"));
  CHECK(names["model.layers.0.self_attn.q_norm.weight"].numel() == options.config.heads * options.config.head_dim());
  CHECK(names["model.layers.0.self_attn.k_norm.weight"].numel() == options.config.kv_dim());
}
