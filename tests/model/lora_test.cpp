// Tests of LoRA adapters (meshrun/arch/lora.hpp, lora_adapter.hpp): the
// adapted forward against the merged weights, frozen base and trainable
// factors, the PEFT directory format and its errors, the merge by hand.
#include "tests/dist/torch_doctest.hpp"

#include <fstream>

#include <nlohmann/json.hpp>

#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/lora_adapter.hpp"
#include "meshrun/model/safetensors.hpp"
#include "meshrun/train/train_engine.hpp"
#include "model_fixtures.hpp"

namespace meshrun {
namespace {

using model_test::TempDir;

LoraSettings lora(int rank, std::vector<std::string> targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                               "up_proj", "down_proj"}) {
  LoraSettings settings;
  settings.rank = rank;
  settings.alpha = 6;
  settings.targets = std::move(targets);
  return settings;
}

LlamaModel model_with(const LoraSettings& settings, uint64_t seed = 11) {
  ModelOptions options;
  options.config = model_test::small_config();
  options.lora = settings;
  torch::manual_seed(seed);
  return LlamaModel(options);
}

ModelInputs inputs() {
  ModelInputs in;
  in.input_ids = torch::tensor({{1, 5, 9, 13, 2, 40}, {7, 7, 3, 0, 47, 21}}, torch::kInt64);
  return in;
}

// Gives every lora_B a random value (a fresh adapter's is zero).
void randomise_b(LlamaModel& model) {
  torch::NoGradGuard no_grad;
  for (auto& item : model->named_parameters())
    if (item.key().find(".lora_B.") != std::string::npos) item.value().normal_(0, 0.2);
}

TEST_CASE("LoRA: a fresh adapter changes nothing, the base is the same model as without adapters") {
  LlamaModel plain = model_with({});
  LlamaModel adapted = model_with(lora(4));
  CHECK(torch::equal(plain->forward(inputs()), adapted->forward(inputs())));
  auto plain_parameters = plain->named_parameters();
  for (const auto& item : adapted->named_parameters()) {
    if (item.key().find(".lora_") != std::string::npos) continue;
    CHECK(torch::equal(item.value(), plain_parameters[item.key()]));
  }
}

TEST_CASE("LoRA: with the adapters off (AdaptersOff) forward is the base model's, exactly, and back on after") {
  LlamaModel plain = model_with({});
  LlamaModel adapted = model_with(lora(4));
  randomise_b(adapted);
  adapted->train();
  const torch::Tensor with_adapters = adapted->forward(inputs());
  CHECK_FALSE(torch::allclose(with_adapters, plain->forward(inputs()), 1e-3, 1e-3));
  {
    torch::NoGradGuard no_grad;
    AdaptersOff base_only(adapted);
    CHECK(torch::equal(adapted->forward(inputs()), plain->forward(inputs())));
  }
  CHECK(torch::equal(adapted->forward(inputs()), with_adapters));
  // Without adapters the guard changes nothing.
  AdaptersOff nothing_to_turn_off(plain);
  CHECK(torch::equal(plain->forward(inputs()), model_with({})->forward(inputs())));
}

TEST_CASE("LoRA: only the factors train; specs split them like the weight they adapt") {
  LlamaModel model = model_with(lora(4, {"q_proj", "down_proj"}));
  int adapters = 0;
  for (const ParameterSpec& spec : model->parameter_specs()) {
    CAPTURE(spec.name);
    const torch::Tensor parameter = model->named_parameters()[spec.name];
    CHECK(parameter.requires_grad() == spec.trainable);
    CHECK(spec.trainable == spec.adapter);
    if (!spec.adapter) continue;
    ++adapters;
    const bool column = spec.name.find("q_proj") != std::string::npos;
    const bool a = spec.name.find(".lora_A.") != std::string::npos;
    CHECK(spec.split_dim == (a ? (column ? -1 : 1) : (column ? 0 : -1)));
    // q_proj [32 → 32], down_proj [48 → 32]
    const std::vector<int64_t> expected = a ? std::vector<int64_t>{4, column ? 32 : 48} : std::vector<int64_t>{32, 4};
    CHECK(spec.full_shape == expected);
  }
  CHECK(adapters == 2 * 2 * 2);  // 2 layers × 2 targets × (A, B)
  CHECK(lora_parameter_count(model->config(), lora(4, {"q_proj", "down_proj"})) == 2 * (4 * (32 + 32) + 4 * (48 + 32)));
  const TrainableModel trainable = TrainableModel::of(model);
  CHECK(trainable.specs.size() == 8);
  CHECK(trainable.parameters.size() == 8);

  // Backward reaches the factors only.
  torch::Tensor loss = model->forward(inputs()).square().mean();
  loss.backward();
  for (const auto& item : model->named_parameters()) {
    CAPTURE(item.key());
    const bool factor = item.key().find(".lora_") != std::string::npos;
    CHECK(item.value().grad().defined() == factor);
  }
}

TEST_CASE("LoRA: the adapted forward equals the base with (alpha / r)·B·A merged in") {
  LlamaModel adapted = model_with(lora(3));
  randomise_b(adapted);
  const torch::Tensor expected = adapted->forward(inputs());

  std::map<std::string, torch::Tensor> full = gather_full_state(adapted);
  LoraAdapter adapter;
  adapter.settings = lora(3);
  adapter.tensors = adapter_tensors(full);
  CHECK(adapter.tensors.size() == 2 * 7 * 2);
  const torch::Tensor q_before = full.at("model.layers.1.self_attn.q_proj.weight").clone();
  merge_lora(full, adapter);
  CHECK(full.count("model.layers.1.self_attn.q_proj.lora_A.weight") == 0);
  const torch::Tensor by_hand = q_before + 2.0 * torch::matmul(adapter.tensors.at("model.layers.1.self_attn.q_proj.lora_B.weight"),
                                                               adapter.tensors.at("model.layers.1.self_attn.q_proj.lora_A.weight"));
  CHECK(torch::allclose(full.at("model.layers.1.self_attn.q_proj.weight"), by_hand, 0, 0));

  LlamaModel plain = model_with({}, 99);
  scatter_full_state(plain, full);
  const torch::Tensor merged = plain->forward(inputs());
  CHECK(torch::allclose(merged, expected, 1e-5, 1e-5));
  CHECK_FALSE(torch::allclose(merged, model_with({})->forward(inputs()), 1e-3, 1e-3));  // the adapter matters
}

TEST_CASE("LoRA dropout: on the adapters' input while training, off in eval") {
  LoraSettings settings = lora(3);
  settings.dropout = 0.5;
  LlamaModel dropped = model_with(settings);
  LlamaModel plain = model_with(lora(3));
  randomise_b(dropped);
  {
    torch::NoGradGuard no_grad;
    auto target = plain->named_parameters();
    for (const auto& item : dropped->named_parameters()) target[item.key()].copy_(item.value());
  }
  dropped->eval();
  CHECK(torch::allclose(dropped->forward(inputs()), plain->forward(inputs()), 1e-6, 1e-6));
  dropped->train();
  torch::manual_seed(5);
  const torch::Tensor first = dropped->forward(inputs());
  torch::manual_seed(6);
  const torch::Tensor second = dropped->forward(inputs());
  CHECK_FALSE(torch::allclose(first, second, 1e-4, 1e-4));
  CHECK_FALSE(torch::allclose(first, plain->forward(inputs()), 1e-4, 1e-4));
}

TEST_CASE("merge_lora by hand: W + (alpha / r)·B·A") {
  std::map<std::string, torch::Tensor> weights = {{"model.layers.0.mlp.up_proj.weight", torch::ones({2, 3})}};
  LoraAdapter adapter;
  adapter.settings.rank = 1;
  adapter.settings.alpha = 2;  // scale 2
  adapter.tensors["model.layers.0.mlp.up_proj.lora_A.weight"] = torch::tensor({{1.f, 2.f, 3.f}});
  adapter.tensors["model.layers.0.mlp.up_proj.lora_B.weight"] = torch::tensor({{1.f}, {-1.f}});
  merge_lora(weights, adapter);
  CHECK(torch::equal(weights.at("model.layers.0.mlp.up_proj.weight"),
                     torch::tensor({{3.f, 5.f, 7.f}, {-1.f, -3.f, -5.f}})));
  adapter.settings.rslora = true;  // alpha / √r: the same at r = 1
  CHECK(adapter.settings.scale() == 2);

  std::map<std::string, torch::Tensor> missing;
  CHECK_THROWS_WITH_AS(merge_lora(missing, adapter), doctest::Contains("the base has no \"model.layers.0.mlp.up_proj.weight\""),
                       LoraAdapterError);
}

TEST_CASE("PEFT adapter directory: PEFT's names and config, read back exactly") {
  TempDir dir;
  LlamaModel model = model_with(lora(2, {"v_proj", "gate_proj"}));
  randomise_b(model);
  LoraAdapter adapter;
  adapter.settings = lora(2, {"v_proj", "gate_proj"});
  adapter.base_model = "/models/base";
  adapter.tensors = adapter_tensors(gather_full_state(model));
  const std::string out = (dir.path() / "adapter").string();
  write_peft_adapter(out, adapter, torch::kFloat32);

  std::ifstream config_file(dir.path() / "adapter" / "adapter_config.json");
  const nlohmann::json config = nlohmann::json::parse(config_file);
  CHECK(config["peft_type"] == "LORA");
  CHECK(config["r"] == 2);
  CHECK(config["lora_alpha"] == 6.0);
  CHECK(config["target_modules"] == nlohmann::json({"v_proj", "gate_proj"}));
  CHECK(config["base_model_name_or_path"] == "/models/base");
  const SafetensorsFile file((dir.path() / "adapter" / "adapter_model.safetensors").string());
  const SafetensorsEntry* a = file.find("base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight");
  const SafetensorsEntry* b = file.find("base_model.model.model.layers.1.mlp.gate_proj.lora_B.weight");
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->shape == std::vector<int64_t>({2, 32}));  // [r, in]
  CHECK(b->shape == std::vector<int64_t>({48, 2}));  // [out, r]
  CHECK(file.entries().size() == 2 * 2 * 2);

  const LoraAdapter back = read_peft_adapter(out, model->config());
  CHECK(back.settings.rank == 2);
  CHECK(back.settings.alpha == 6);
  CHECK(back.base_model == "/models/base");
  CHECK(back.settings.targets == std::vector<std::string>({"gate_proj", "v_proj"}));
  REQUIRE(back.tensors.size() == adapter.tensors.size());
  for (const auto& [name, tensor] : adapter.tensors) CHECK(torch::equal(back.tensors.at(name), tensor));
}

// Writes an adapter directory with `config` and `tensors` (PEFT names).
std::string write_adapter(const TempDir& dir, const std::string& name, const nlohmann::json& config,
                          const TensorList& tensors) {
  const auto folder = dir.path() / name;
  std::filesystem::create_directories(folder);
  std::ofstream(folder / "adapter_config.json") << config.dump();
  write_safetensors((folder / "adapter_model.safetensors").string(), tensors);
  return folder.string();
}

TEST_CASE("PEFT adapter directory: what does not fit the model is a located error") {
  TempDir dir;
  const ModelConfig config = model_test::small_config();
  const nlohmann::json lora_config = {{"peft_type", "LORA"}, {"r", 2}, {"lora_alpha", 4}};
  const std::string prefix = "base_model.model.model.layers.0.self_attn.q_proj.";
  const TensorList good = {{prefix + "lora_A.weight", torch::zeros({2, 32})}, {prefix + "lora_B.weight", torch::zeros({32, 2})}};
  CHECK_NOTHROW(read_peft_adapter(write_adapter(dir, "good", lora_config, good), config));

  CHECK_THROWS_WITH_AS(read_peft_adapter((dir.path() / "none").string(), config),
                       doctest::Contains("adapter_config.json: no such file"), LoraAdapterError);
  CHECK_THROWS_WITH_AS(read_peft_adapter(write_adapter(dir, "prefix", {{"peft_type", "PREFIX_TUNING"}}, good), config),
                       doctest::Contains("only LORA adapters apply"), LoraAdapterError);
  CHECK_THROWS_WITH_AS(
      read_peft_adapter(write_adapter(dir, "shape", lora_config,
                                      {{prefix + "lora_A.weight", torch::zeros({2, 31})},
                                       {prefix + "lora_B.weight", torch::zeros({32, 2})}}),
                        config),
      doctest::Contains("lora_A.weight\" has shape [2, 31]; r = 2 on this model's q_proj needs [2, 32]"),
      LoraAdapterError);
  CHECK_THROWS_WITH_AS(
      read_peft_adapter(write_adapter(dir, "module", lora_config,
                                      {{"base_model.model.model.layers.0.self_attn.rotary.lora_A.weight",
                                        torch::zeros({2, 32})}}),
                        config),
      doctest::Contains("is not a projection a LoRA adapter can target"), LoraAdapterError);
  CHECK_THROWS_WITH_AS(
      read_peft_adapter(write_adapter(dir, "layer", lora_config,
                                      {{"base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight",
                                        torch::zeros({2, 32})}}),
                        config),
      doctest::Contains("layer 7 but the model has 2"), LoraAdapterError);
  CHECK_THROWS_WITH_AS(
      read_peft_adapter(write_adapter(dir, "partner", lora_config, {{prefix + "lora_A.weight", torch::zeros({2, 32})}}),
                        config),
      doctest::Contains("has no partner"), LoraAdapterError);
  CHECK_THROWS_WITH_AS(read_peft_adapter(write_adapter(dir, "rank", {{"peft_type", "LORA"}, {"r", "two"}}, good), config),
                       doctest::Contains("\"r\" has the wrong type"), LoraAdapterError);
  // A rank is an integer as written: not 4.5 read as 4, nor 2^32 + 4 wrapped to 4.
  CHECK_THROWS_WITH_AS(read_peft_adapter(write_adapter(dir, "half", {{"peft_type", "LORA"}, {"r", 4.5}}, good), config),
                       doctest::Contains("\"r\" has the wrong type (4.5"), LoraAdapterError);
  CHECK_THROWS_WITH_AS(
      read_peft_adapter(write_adapter(dir, "wrap", {{"peft_type", "LORA"}, {"r", 4294967300LL}}, good), config),
      doctest::Contains("\"r\" has the wrong type (4294967300"), LoraAdapterError);
  // A number JSON cannot hold is "not JSON", naming the file, not a library error.
  const std::string overflow = write_adapter(dir, "overflow", lora_config, good);
  std::ofstream(std::filesystem::path(overflow) / "adapter_config.json") << R"({"peft_type": "LORA", "r": 2, "lora_alpha": 1e400})";
  CHECK_THROWS_WITH_AS(read_peft_adapter(overflow, config), doctest::Contains("adapter_config.json: not JSON"),
                       LoraAdapterError);
}

}  // namespace
}  // namespace meshrun
