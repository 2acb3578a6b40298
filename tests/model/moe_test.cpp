// Mixtures of experts (Qwen3-MoE, Mixtral, OLMoE): their config.json keys
// and the located errors for bad ones, which layers are sparse, parameter
// counts of the planner's table, and the model's routing: the load-balancing
// loss's padding and gradients, gradient checkpointing, experts no token
// picks, a router missing from the files. (Logits, decode and the loss
// against transformers: transformers_parity_test.cpp; tp 2 against tp 1:
// tensor_parallel_test.cpp.)
#include "tests/dist/torch_doctest.hpp"

#include <filesystem>

#include "meshrun/arch/lora.hpp"
#include "meshrun/arch/architecture.hpp"
#include "meshrun/arch/model_config.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/model/safetensors.hpp"
#include "model_fixtures.hpp"

using namespace meshrun;

namespace {

// A Qwen3-MoE config.json (transformers 5's keys) with `extra` keys merged in.
std::string qwen3_moe_json(const std::string& extra = "") {
  return R"({"model_type": "qwen3_moe", "hidden_size": 32, "intermediate_size": 48, "moe_intermediate_size": 16,
             "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 40,
             "num_experts": 4, "num_experts_per_tok": 2)" +
         (extra.empty() ? "" : ", " + extra) + "}";
}

std::string error_of(const std::string& text) {
  try {
    model_config_from_json(text, "config.json");
  } catch (const ModelConfigError& error) {
    return error.what();
  }
  return "";
}

ModelConfig tiny_moe(ModelFamily family = ModelFamily::qwen3_moe) {
  ModelConfig c = model_test::small_config();
  c.family = family;
  apply_family_layout(c);
  c.experts = 6;
  c.experts_per_token = 2;
  c.expert_intermediate = family == ModelFamily::qwen3_moe ? 16 : c.intermediate;
  c.norm_topk_prob = true;
  return c;
}

}  // namespace

TEST_CASE("MoE config.json: the keys of each family, written back as read") {
  const ModelConfig qwen = model_config_from_json(qwen3_moe_json(R"("norm_topk_prob": true, "mlp_only_layers": [2],
      "router_aux_loss_coef": 0.02)"), "config.json");
  CHECK(qwen.experts == 4);
  CHECK(qwen.experts_per_token == 2);
  CHECK(qwen.expert_intermediate == 16);
  CHECK(qwen.norm_topk_prob);
  CHECK(qwen.router_aux_loss_coef == 0.02);
  CHECK(qwen.sparse_layer(0));
  CHECK(qwen.sparse_layer(1));
  CHECK_FALSE(qwen.sparse_layer(2));
  CHECK(qwen.qk_norm);  // Qwen3's per-head q/k norms
  // Qwen3-MoE's defaults: transformers' 0.001, not renormalised.
  const ModelConfig defaults = model_config_from_json(qwen3_moe_json(), "config.json");
  CHECK(defaults.router_aux_loss_coef == 0.001);
  CHECK_FALSE(defaults.norm_topk_prob);

  // decoder_sparse_step 2: layers 1, 3, ... are sparse.
  const ModelConfig stepped = model_config_from_json(qwen3_moe_json(R"("decoder_sparse_step": 2)"), "config.json");
  CHECK_FALSE(stepped.sparse_layer(0));
  CHECK(stepped.sparse_layer(1));
  CHECK_FALSE(stepped.sparse_layer(2));
  CHECK(stepped.sparse_layers() == 1);

  const ModelConfig mixtral = model_config_from_json(
      R"({"model_type": "mixtral", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 40, "num_local_experts": 8,
          "num_experts_per_tok": 2, "sliding_window": 16})",
      "config.json");
  CHECK(mixtral.experts == 8);
  CHECK(mixtral.expert_intermediate == 48);
  CHECK(mixtral.norm_topk_prob);  // always, for Mixtral
  CHECK(mixtral.sliding_window == 16);
  CHECK(mixtral.sparse_layers() == 2);

  const ModelConfig olmoe = model_config_from_json(
      R"({"model_type": "olmoe", "hidden_size": 32, "intermediate_size": 16, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 40, "num_experts": 8,
          "num_experts_per_tok": 4, "clip_qkv": 8.0})",
      "config.json");
  CHECK(olmoe.clip_qkv == 8.0);
  CHECK(olmoe.router_aux_loss_coef == 0.01);
  CHECK(olmoe.qk_norm_full_width);

  for (const ModelConfig* config : {&qwen, &stepped, &mixtral, &olmoe}) {
    CAPTURE(config->model_type());
    const ModelConfig back = model_config_from_json(
        model_config_to_json(*config, ModelHead::language_model, "float32"), "written");
    CHECK(back.family == config->family);
    CHECK(back.experts == config->experts);
    CHECK(back.experts_per_token == config->experts_per_token);
    CHECK(back.expert_intermediate == config->expert_intermediate);
    CHECK(back.norm_topk_prob == config->norm_topk_prob);
    CHECK(back.router_aux_loss_coef == config->router_aux_loss_coef);
    CHECK(back.mlp_only_layers == config->mlp_only_layers);
    CHECK(back.decoder_sparse_step == config->decoder_sparse_step);
    CHECK(back.clip_qkv == config->clip_qkv);
    CHECK(back.parameters() == config->parameters());
  }
}

TEST_CASE("MoE config.json: bad keys are errors naming the key") {
  CHECK(error_of(qwen3_moe_json(R"("num_experts_per_tok": 5)")).find(
            "num_experts_per_tok 5 must be between 1 and num_experts (4)") != std::string::npos);
  CHECK(error_of(qwen3_moe_json(R"("num_experts_per_tok": 0)")).find("num_experts_per_tok 0") != std::string::npos);
  CHECK(error_of(qwen3_moe_json(R"("mlp_only_layers": [3])")).find(
            "mlp_only_layers names layer 3 of a model of 3 layers") != std::string::npos);
  CHECK(error_of(qwen3_moe_json(R"("mlp_only_layers": "all")")).find("mlp_only_layers") != std::string::npos);
  CHECK(error_of(qwen3_moe_json(R"("decoder_sparse_step": 0)")).find("decoder_sparse_step 0") != std::string::npos);
  CHECK(error_of(qwen3_moe_json(R"("num_experts": 100000)")).find("num_experts 100000") != std::string::npos);
  CHECK(error_of(qwen3_moe_json(R"("router_aux_loss_coef": -1)")).find("router_aux_loss_coef") != std::string::npos);
  // Training noise meshrun does not add.
  CHECK(error_of(R"({"model_type": "mixtral", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "vocab_size": 40, "num_local_experts": 4, "num_experts_per_tok": 2,
                     "router_jitter_noise": 0.1})")
            .find("router_jitter_noise 0.1 is not supported") != std::string::npos);
  CHECK(error_of(R"({"model_type": "mixtral", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "vocab_size": 40, "num_experts_per_tok": 2})")
            .find("needs num_local_experts") != std::string::npos);
  CHECK(error_of(R"({"model_type": "olmoe", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "vocab_size": 40, "num_experts": 4})")
            .find("num_experts_per_tok") != std::string::npos);
  CHECK(error_of(R"({"model_type": "deepseek_v3", "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
                     "num_attention_heads": 4, "vocab_size": 40})")
            .find("model_type \"deepseek_v3\" is not supported") != std::string::npos);
  // Qwen3-MoE without experts is a dense model; Mixtral always routes.
  const ModelConfig dense = model_config_from_json(qwen3_moe_json(R"("num_experts": 0)"), "config.json");
  CHECK_FALSE(dense.mixture_of_experts());
  CHECK(dense.sparse_layers() == 0);
}

TEST_CASE("The planner's MoE shapes: total and active parameters of the public checkpoints") {
  std::string error;
  const auto mixtral = resolve_architecture("mistralai/Mixtral-8x7B-v0.1", error);
  REQUIRE(mixtral);
  CHECK(mixtral->parameters() == 46'702'792'704);  // Mixtral's published 46.7B
  CHECK(mixtral->active_parameters() == 12'879'925'248);  // 2 of 8 experts: its published 12.9B
  const auto qwen = resolve_architecture("Qwen/Qwen3-30B-A3B", error);
  REQUIRE(qwen);
  CHECK(qwen->family == ModelFamily::qwen3_moe);
  CHECK(qwen->parameters() == 30'532'122'624);  // 30.5B
  CHECK(qwen->active_parameters() / 100'000'000 == 33);  // "A3B": 3.3B active
  const auto olmoe = resolve_architecture("allenai/OLMoE-1B-7B-0924", error);
  REQUIRE(olmoe);
  CHECK(olmoe->parameters() / 10'000'000 == 691);  // 6.9B
  CHECK(olmoe->active_parameters() / 10'000'000 == 128);  // 1.3B active
}

TEST_CASE("The load-balancing loss counts real tokens only, and reaches the routers") {
  ModelOptions options;
  options.config = tiny_moe();
  torch::manual_seed(3);
  LlamaModel model(options);
  torch::manual_seed(4);
  const torch::Tensor ids = torch::randint(48, {1, 7}, torch::kInt64);
  // The same row left-padded by three tokens under a mask.
  const torch::Tensor padded = torch::cat({torch::zeros({1, 3}, torch::kInt64), ids}, 1);
  const torch::Tensor mask = torch::cat({torch::zeros({1, 3}, torch::kInt64), torch::ones({1, 7}, torch::kInt64)}, 1);
  model->forward({ids, {}, {}, {}});
  const RouterStats plain = model->router_stats();
  model->forward({padded, {}, {}, mask});
  const RouterStats masked = model->router_stats();
  CHECK(std::abs(plain.aux_loss.item<double>() - masked.aux_loss.item<double>()) <= 1e-5);
  CHECK(plain.expert_load_max.item<double>() >= 1.0);
  // Balanced, the loss is top-k; it can only be larger when skewed.
  CHECK(plain.aux_loss.item<double>() >= 1.0);

  // Its gradient reaches every router, and no expert (they do not shape it).
  model->zero_grad();
  model->forward({ids, {}, {}, {}});
  model->router_stats().aux_loss.backward();
  auto parameters = model->named_parameters();
  for (int layer = 0; layer < 2; ++layer) {
    const torch::Tensor router = parameters["model.layers." + std::to_string(layer) + ".mlp.gate.weight"].grad();
    REQUIRE(router.defined());
    CHECK(router.abs().sum().item<double>() > 0);
  }

  // A dense model records nothing.
  ModelOptions dense;
  dense.config = model_test::small_config();
  LlamaModel llama(dense);
  llama->forward({ids, {}, {}, {}});
  CHECK_FALSE(llama->router_stats().aux_loss.defined());
}

TEST_CASE("MoE under gradient checkpointing: the same gradients, the load-balancing loss's included") {
  torch::manual_seed(8);
  const torch::Tensor ids = torch::randint(48, {2, 9}, torch::kInt64);
  const torch::Tensor labels = torch::randint(48, {2, 9}, torch::kInt64);
  std::map<std::string, torch::Tensor> reference;
  for (const bool checkpointing : {false, true}) {
    ModelOptions options;
    options.config = tiny_moe(ModelFamily::mixtral);
    options.gradient_checkpointing = checkpointing;
    torch::manual_seed(3);
    LlamaModel model(options);
    const torch::Tensor loss = model->forward_loss_sum({ids, {}, {}, {}}, labels);
    (loss + 0.1 * model->router_stats().aux_loss).backward();
    for (const auto& item : model->named_parameters()) {
      const torch::Tensor grad = item.value().grad();
      REQUIRE_MESSAGE(grad.defined(), item.key());
      if (!checkpointing) {
        reference[item.key()] = grad.clone();
        continue;
      }
      CAPTURE(item.key());
      CHECK((grad - reference.at(item.key())).abs().max().item<double>() <= 1e-6);
    }
  }
}

TEST_CASE("An expert no token picks still gets a (zero) gradient") {
  ModelOptions options;
  options.config = tiny_moe();
  options.config.experts = 16;
  options.config.experts_per_token = 1;
  torch::manual_seed(3);
  LlamaModel model(options);
  // Two tokens, one pick each: at most 2 of 16 experts run on rows.
  model->forward_loss_sum({torch::tensor({{5, 9}}, torch::kInt64), {}, {}, {}}, torch::tensor({{9, 7}}, torch::kInt64))
      .backward();
  int zero = 0;
  for (int e = 0; e < 16; ++e) {
    const torch::Tensor grad =
        model->named_parameters()["model.layers.0.mlp.experts." + std::to_string(e) + ".up_proj.weight"].grad();
    REQUIRE(grad.defined());
    zero += grad.abs().sum().item<double>() == 0;
  }
  CHECK(zero >= 14);
}

TEST_CASE("A MoE model directory without a router or an expert is a located load error") {
  model_test::TempDir dir;
  ModelOptions options;
  options.config = tiny_moe(ModelFamily::olmoe);
  LlamaModel model(options);
  save_hf_model(dir.file("whole"), model);
  CHECK(load_hf_model(dir.file("whole"), ModelOptions{})->config().experts == 6);
  for (const std::string missing : {"model.layers.1.mlp.gate.weight", "model.layers.0.mlp.experts.5.down_proj.weight"}) {
    CAPTURE(missing);
    const std::string folder = dir.file("without");
    std::filesystem::remove_all(folder);
    std::filesystem::create_directories(folder);
    std::filesystem::copy_file(dir.file("whole/config.json"), folder + "/config.json");
    TensorList kept;
    for (const auto& [name, tensor] : gather_full_state(model))
      if (name != missing) kept.emplace_back(name, tensor);
    write_safetensors(folder + "/model.safetensors", kept);
    try {
      load_hf_model(folder, ModelOptions{});
      FAIL("loaded a model without " << missing);
    } catch (const Error& error) {
      const std::string message = error.what();
      CAPTURE(message);
      CHECK(message.find(missing) != std::string::npos);
      CHECK(message.find(folder) != std::string::npos);
    }
  }
}

TEST_CASE("LoRA on a mixture: the experts take none, and the planner counts what the model builds") {
  ModelOptions options;
  options.config = tiny_moe();
  options.config.layers = 3;
  options.config.mlp_only_layers = {1};  // one dense layer, whose MLP is adapted
  options.lora.rank = 4;
  options.lora.targets = {"q_proj", "v_proj", "gate_proj", "down_proj"};
  LlamaModel model(options);
  int64_t adapters = 0;
  for (const auto& spec : model->parameter_specs())
    if (spec.adapter) {
      CHECK(spec.name.find("experts") == std::string::npos);
      adapters += model->named_parameters()[spec.name].numel();
    }
  CHECK(model->named_parameters().contains("model.layers.1.mlp.gate_proj.lora_A.weight"));
  CHECK_FALSE(model->named_parameters().contains("model.layers.0.mlp.gate_proj.lora_A.weight"));
  CHECK(lora_parameter_count(options.config, options.lora) == adapters);
}
