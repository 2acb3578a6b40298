// meshrun's logits against an independent plain-PyTorch implementation
// (tests/model/reference_llama.py, run with the Python of the torch meshrun builds against):
// GQA, tied and untied, Qwen2 biases, Qwen3's q/k norms with its own
// head_dim (and attention_bias on every projection), linear / dynamic / llama3 rope
// scaling, a packed batch, a padded batch, bf16 and fp16 weights. Then
// save and reload in meshrun: identical logits, and dtype conversion.
#include "tests/dist/torch_doctest.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "meshrun/error.hpp"
#include "meshrun/model/hf_model.hpp"
#include "model_fixtures.hpp"

using namespace meshrun;

namespace {

// The reference cases, written once per test run.
const model_test::TempDir& reference_cases() {
  static model_test::TempDir dir;
  static const bool written = [] {
    const std::string command = std::string(MESHRUN_TORCH_PYTHON) + " " + MESHRUN_SOURCE_DIR +
                                "/tests/model/reference_llama.py " + dir.path().string() + " > " +
                                dir.file("python.log") + " 2>&1";
    return std::system(command.c_str()) == 0;
  }();
  if (!written) {
    std::ifstream log(dir.file("python.log"));
    std::stringstream text;
    text << log.rdbuf();
    FAIL("reference_llama.py failed:\n" << text.str());
  }
  return dir;
}

struct Case {
  ModelInputs inputs;
  torch::Tensor expected;
  torch::Tensor real;  // [batch, seq] bool: positions whose logits are compared
};

Case load_case(const std::string& directory) {
  SafetensorsFile file(directory + "/expected.safetensors");
  Case c;
  c.inputs.input_ids = file.load("input_ids");
  if (file.find("position_ids")) c.inputs.position_ids = file.load("position_ids");
  if (file.find("sequence_ids")) c.inputs.sequence_ids = file.load("sequence_ids");
  if (file.find("attention_mask")) c.inputs.attention_mask = file.load("attention_mask");
  c.expected = file.load("logits");
  c.real = c.inputs.attention_mask.defined() ? c.inputs.attention_mask.ne(0)
                                             : torch::ones_like(c.inputs.input_ids, torch::kBool);
  return c;
}

double max_difference(const torch::Tensor& logits, const Case& c) {
  return (logits.to(torch::kFloat) - c.expected).abs().amax(-1).masked_select(c.real).max().item<double>();
}

torch::Tensor forward(LlamaModel& model, const ModelInputs& inputs) {
  torch::NoGradGuard no_grad;
  return model->forward(inputs);
}

}  // namespace

TEST_CASE("logits match the independent reference within 1e-5 in fp32") {
  const auto& dir = reference_cases();
  for (const char* name : {"gqa_untied", "tied_mha", "qwen2_bias", "llama3_rope", "linear_rope", "dynamic_rope",
                           "packed", "padded", "bf16_weights", "fp16_weights", "qwen3_qk_norm", "qwen3_attention_bias"}) {
    CAPTURE(name);
    const std::string directory = dir.file(name);
    LlamaModel model = load_hf_model(directory, ModelOptions{});
    const Case c = load_case(directory);
    const torch::Tensor logits = forward(model, c.inputs);
    REQUIRE(logits.sizes() == c.expected.sizes());
    CHECK(max_difference(logits, c) < 1e-5);
  }
  // The case set really varies what it claims to.
  CHECK(read_model_config(dir.file("qwen2_bias") + "/config.json").qkv_bias);
  CHECK(read_model_config(dir.file("gqa_untied") + "/config.json").kv_heads == 2);
  CHECK(read_model_config(dir.file("qwen3_qk_norm") + "/config.json").qk_norm);
  CHECK(read_model_config(dir.file("qwen3_qk_norm") + "/config.json").head_dim() == 16);
  CHECK(read_model_config(dir.file("qwen3_attention_bias") + "/config.json").o_bias);
  CHECK(SafetensorsFile(dir.file("bf16_weights") + "/model.safetensors").entries()[0].dtype == "BF16");
}

TEST_CASE("without position_ids a padded batch takes its positions from the attention mask") {
  const std::string directory = reference_cases().file("padded");
  LlamaModel model = load_hf_model(directory, ModelOptions{});
  Case c = load_case(directory);
  c.inputs.position_ids = torch::Tensor();
  CHECK(max_difference(forward(model, c.inputs), c) < 1e-5);
}

TEST_CASE("packing matters: without sequence_ids the packed batch gives other logits") {
  const std::string directory = reference_cases().file("packed");
  LlamaModel model = load_hf_model(directory, ModelOptions{});
  Case c = load_case(directory);
  c.inputs.sequence_ids = torch::Tensor();
  CHECK(max_difference(forward(model, c.inputs), c) > 1e-3);
}

TEST_CASE("a model saved by meshrun reloads to identical logits, in one file or in shards") {
  model_test::TempDir out;
  for (const char* name : {"qwen2_bias", "gqa_untied", "qwen3_qk_norm"}) {
    CAPTURE(name);
    const std::string directory = reference_cases().file(name);
    LlamaModel model = load_hf_model(directory, ModelOptions{});
    const Case c = load_case(directory);
    const torch::Tensor logits = forward(model, c.inputs);

    save_hf_model(out.file(name), model);
    LlamaModel reloaded = load_hf_model(out.file(name), ModelOptions{});
    CHECK(torch::equal(forward(reloaded, c.inputs), logits));

    SaveModelOptions sharded;
    sharded.max_shard_bytes = 8192;
    save_hf_model(out.file(std::string(name) + "-sharded"), model, sharded);
    CHECK(std::filesystem::exists(out.file(std::string(name) + "-sharded/model.safetensors.index.json")));
    LlamaModel from_shards = load_hf_model(out.file(std::string(name) + "-sharded"), ModelOptions{});
    CHECK(torch::equal(forward(from_shards, c.inputs), logits));

    std::ifstream config_file(out.file(name) + "/config.json");
    const auto config = nlohmann::json::parse(config_file);
    CHECK(config["torch_dtype"] == "float32");
    CHECK(config["model_type"] == read_model_config(directory + "/config.json").model_type());
  }
}

TEST_CASE("saving in bf16 or fp16 rounds each weight; loading converts to the model dtype") {
  model_test::TempDir out;
  const std::string directory = reference_cases().file("tied_mha");
  LlamaModel model = load_hf_model(directory, ModelOptions{});
  const auto original = gather_full_state(model);
  CHECK_FALSE(original.count("lm_head.weight"));  // tied: Hugging Face stores no lm_head
  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    CAPTURE(dtype);
    SaveModelOptions options;
    options.dtype = dtype;
    save_hf_model(out.file("half"), model, options);
    CHECK(read_model_config(out.file("half/config.json")).torch_dtype == torch_dtype_name(dtype));
    CHECK(SafetensorsFile(out.file("half/model.safetensors")).find("model.norm.weight")->dtype ==
          safetensors_dtype_name(dtype));

    LlamaModel as_fp32 = load_hf_model(out.file("half"), ModelOptions{});
    for (const auto& [name, tensor] : gather_full_state(as_fp32)) {
      CAPTURE(name);
      CHECK((tensor.scalar_type() == torch::kFloat32));
      CHECK(torch::equal(tensor, original.at(name).to(dtype).to(torch::kFloat32)));
    }
    ModelOptions half_options;
    half_options.dtype = dtype;
    LlamaModel as_half = load_hf_model(out.file("half"), half_options);
    for (const auto& [name, tensor] : gather_full_state(as_half)) CHECK(torch::equal(tensor, original.at(name).to(dtype)));
    // It runs in half precision (torch 2.x has fp16 matmuls on the CPU too), close to fp32.
    const Case c = load_case(directory);
    const torch::Tensor logits = forward(as_half, c.inputs);
    CHECK((logits.scalar_type() == dtype));
    CHECK(max_difference(logits, c) < 0.5);
  }
}

TEST_CASE("loading reports a missing tensor and a shape that disagrees with config.json") {
  model_test::TempDir out;
  LlamaModel model = load_hf_model(reference_cases().file("gqa_untied"), ModelOptions{});
  auto state = gather_full_state(model);
  SUBCASE("missing") {
    TensorList tensors;
    for (const auto& [name, tensor] : state)
      if (name != "model.layers.1.mlp.up_proj.weight") tensors.emplace_back(name, tensor);
    write_safetensors_directory(out.file("m"), tensors, 1 << 30);
    std::filesystem::copy_file(reference_cases().file("gqa_untied") + "/config.json", out.file("m/config.json"));
    CHECK_THROWS_WITH_AS(load_hf_model(out.file("m"), ModelOptions{}),
                         doctest::Contains("lack tensor \"model.layers.1.mlp.up_proj.weight\""), ModelLoadError);
  }
  SUBCASE("wrong shape") {
    state["model.norm.weight"] = torch::ones({31});
    TensorList tensors(state.begin(), state.end());
    write_safetensors_directory(out.file("m"), tensors, 1 << 30);
    std::filesystem::copy_file(reference_cases().file("gqa_untied") + "/config.json", out.file("m/config.json"));
    CHECK_THROWS_WITH_AS(load_hf_model(out.file("m"), ModelOptions{}),
                         doctest::Contains("tensor \"model.norm.weight\" has shape [31], config.json implies [32]"),
                         ModelLoadError);
  }
  SUBCASE("sizes in config.json that the weights do not back are refused before anything is allocated") {
    TensorList tensors(state.begin(), state.end());
    write_safetensors_directory(out.file("m"), tensors, 1 << 30);
    nlohmann::json config =
        nlohmann::json::parse(read_bounded(reference_cases().file("gqa_untied") + "/config.json", 1 << 20).text);
    config["num_hidden_layers"] = 4096;
    config["intermediate_size"] = 1 << 20;
    std::ofstream(out.file("m/config.json")) << config.dump();
    // The model this config describes would need ~1.6 TB; the error comes first.
    CHECK_THROWS_WITH_AS(load_hf_model(out.file("m"), ModelOptions{}),
                         doctest::Contains("config.json implies"), ModelLoadError);
  }
  SUBCASE("saving a state that lacks a tensor") {
    state.erase("lm_head.weight");
    CHECK_THROWS_WITH_AS(save_hf_model(out.file("s"), model->config(), ModelHead::language_model, state),
                         doctest::Contains("\"lm_head.weight\" is missing"), ModelLoadError);
  }
}

TEST_CASE("a value model loads from a language model with a new score head, and saves as a classifier") {
  model_test::TempDir out;
  const std::string directory = reference_cases().file("gqa_untied");
  ModelOptions options;
  options.head = ModelHead::value;
  LlamaModel critic = load_hf_model(directory, options);
  const Case c = load_case(directory);
  const torch::Tensor values = forward(critic, c.inputs);
  CHECK(values.sizes() == c.inputs.input_ids.sizes());
  CHECK(critic->parameter_specs().back().name == "score.weight");
  CHECK(critic->parameter_specs().back().full_shape == std::vector<int64_t>{1, 32});
  save_hf_model(out.file("critic"), critic);
  std::ifstream config_file(out.file("critic/config.json"));
  CHECK(nlohmann::json::parse(config_file)["architectures"][0] == "LlamaForSequenceClassification");
  LlamaModel reloaded = load_hf_model(out.file("critic"), options);
  CHECK(torch::equal(forward(reloaded, c.inputs), values));
}
