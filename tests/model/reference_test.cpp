// meshrun's logits against an independent plain-PyTorch implementation
// (tests/model/reference_llama.py, run with the Python of the torch meshrun builds against):
// GQA, tied and untied, Qwen2 biases, Qwen3's q/k norms with its own
// head_dim (and attention_bias on every projection), Phi-3's fused
// qkv_proj / gate_up_proj files with a sliding window, linear / dynamic /
// llama3 / yarn rope scaling, Phi-3's longrope on either side of its
// original context, a packed batch, a padded batch, bf16 and fp16
// weights. Then save and reload in meshrun: identical logits, Phi-3's
// fused tensors written back bit for bit, and dtype conversion.
#include "tests/dist/torch_doctest.hpp"

#include <cstdlib>
#include <functional>
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
                           "packed", "padded", "bf16_weights", "fp16_weights", "qwen3_qk_norm", "qwen3_attention_bias",
                           "phi3_fused", "phi3_packed_mha", "yarn_rope", "yarn_mscale", "phi3_longrope_long",
                           "phi3_longrope_short"}) {
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
  CHECK(read_model_config(dir.file("phi3_fused") + "/config.json").family == ModelFamily::phi3);
  CHECK(read_model_config(dir.file("phi3_fused") + "/config.json").sliding_window == 5);
  CHECK(SafetensorsFile(dir.file("phi3_fused") + "/model.safetensors").find("model.layers.1.self_attn.qkv_proj.weight"));
  CHECK(SafetensorsFile(dir.file("bf16_weights") + "/model.safetensors").entries()[0].dtype == "BF16");
  const ModelConfig yarn = read_model_config(dir.file("yarn_rope") + "/config.json");
  CHECK(yarn.rope_scaling.type == RopeScaling::Type::yarn);
  CHECK(yarn.rope_attention_factor() > 1.1);
  const ModelConfig longrope = read_model_config(dir.file("phi3_longrope_long") + "/config.json");
  CHECK(longrope.rope_scaling.type == RopeScaling::Type::longrope);
  CHECK(longrope.rope_original_context() == 32);
  CHECK(load_case(dir.file("phi3_longrope_long")).inputs.position_ids.max().item<int64_t>() >= 32);
  CHECK(load_case(dir.file("phi3_longrope_short")).inputs.input_ids.size(1) <= 32);
}

TEST_CASE("scaled rope matters: yarn and longrope logits differ from the same model without the scaling") {
  for (const char* name : {"yarn_rope", "phi3_longrope_long", "phi3_longrope_short"}) {
    CAPTURE(name);
    const std::string directory = reference_cases().file(name);
    ModelConfig config = read_model_config(directory + "/config.json");
    const Case c = load_case(directory);
    LlamaModel scaled = load_hf_model(directory, ModelOptions{});
    config.rope_scaling = RopeScaling{};
    model_test::TempDir plain;
    std::filesystem::create_directories(plain.path() / "m");
    std::ofstream(plain.file("m/config.json")) << model_config_to_json(config, ModelHead::language_model, "float32");
    std::filesystem::copy_file(directory + "/model.safetensors", plain.file("m/model.safetensors"));
    LlamaModel unscaled = load_hf_model(plain.file("m"), ModelOptions{});
    CHECK(max_difference(forward(unscaled, c.inputs), c) > 1e-3);
    CHECK(max_difference(forward(scaled, c.inputs), c) < 1e-5);
  }
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
  for (const char* name : {"qwen2_bias", "gqa_untied", "qwen3_qk_norm", "phi3_fused", "phi3_longrope_long", "yarn_mscale"}) {
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

TEST_CASE("the window matters: Phi-3's model without its sliding_window gives other logits") {
  model_test::TempDir out;
  const std::string directory = reference_cases().file("phi3_fused");
  std::filesystem::create_directories(out.file("full"));
  std::filesystem::copy_file(directory + "/model.safetensors", out.file("full/model.safetensors"));
  nlohmann::json config = nlohmann::json::parse(read_bounded(directory + "/config.json", 1 << 20).text);
  config["sliding_window"] = nullptr;
  std::ofstream(out.file("full/config.json")) << config.dump();
  LlamaModel model = load_hf_model(out.file("full"), ModelOptions{});
  CHECK(max_difference(forward(model, load_case(directory).inputs), load_case(directory)) > 1e-3);
}

TEST_CASE("Phi-3: the fused tensors split into q/k/v and gate/up, and are written back fused, bit for bit") {
  model_test::TempDir out;
  const std::string directory = reference_cases().file("phi3_fused");
  LlamaModel model = load_hf_model(directory, ModelOptions{});
  const SafetensorsFile original(directory + "/model.safetensors");
  // In the model, the parts under their unfused names: rows of the fused tensor in order.
  const auto state = gather_full_state(model);
  CHECK_FALSE(state.count("model.layers.0.self_attn.qkv_proj.weight"));
  const torch::Tensor qkv = original.load("model.layers.1.self_attn.qkv_proj.weight");
  CHECK(torch::equal(state.at("model.layers.1.self_attn.q_proj.weight"), qkv.narrow(0, 0, 32)));
  CHECK(torch::equal(state.at("model.layers.1.self_attn.k_proj.weight"), qkv.narrow(0, 32, 16)));
  CHECK(torch::equal(state.at("model.layers.1.self_attn.v_proj.weight"), qkv.narrow(0, 48, 16)));
  const torch::Tensor gate_up = original.load("model.layers.0.mlp.gate_up_proj.weight");
  CHECK(torch::equal(state.at("model.layers.0.mlp.gate_proj.weight"), gate_up.narrow(0, 0, 48)));
  CHECK(torch::equal(state.at("model.layers.0.mlp.up_proj.weight"), gate_up.narrow(0, 48, 48)));

  // Saved from the model and from a state map (as ckpt convert and the trainers do): the file's tensors.
  save_hf_model(out.file("model"), model);
  save_hf_model(out.file("state"), model->config(), ModelHead::language_model, state);
  for (const char* saved : {"model", "state"}) {
    CAPTURE(saved);
    const SafetensorsFile file(out.file(saved) + "/model.safetensors");
    CHECK(file.entries().size() == original.entries().size());
    for (const SafetensorsEntry& entry : original.entries()) {
      CAPTURE(entry.name);
      REQUIRE(file.find(entry.name));
      CHECK(file.find(entry.name)->shape == entry.shape);
      CHECK(torch::equal(file.load(entry.name), original.load(entry.name)));
    }
    CHECK_FALSE(file.find("model.layers.0.self_attn.q_proj.weight"));
    CHECK_FALSE(file.find("model.layers.0.mlp.up_proj.weight"));
    const auto config = nlohmann::json::parse(read_bounded(out.file(saved) + "/config.json", 1 << 20).text);
    CHECK(config["architectures"] == nlohmann::json::array({"Phi3ForCausalLM"}));
    CHECK(config["model_type"] == "phi3");
    CHECK(config["sliding_window"] == 5);
    CHECK(config["partial_rotary_factor"] == 1.0);
    CHECK(config["pad_token_id"].is_null());
  }

  // A critic of it is a Phi3ForSequenceClassification with the same fused layers.
  ModelOptions value;
  value.head = ModelHead::value;
  LlamaModel critic = load_hf_model(directory, value);
  save_hf_model(out.file("critic"), critic);
  CHECK(nlohmann::json::parse(read_bounded(out.file("critic/config.json"), 1 << 20).text)["architectures"][0] ==
        "Phi3ForSequenceClassification");
  const Case c = load_case(directory);
  LlamaModel reloaded = load_hf_model(out.file("critic"), value);
  CHECK(torch::equal(forward(reloaded, c.inputs), forward(critic, c.inputs)));
  CHECK(SafetensorsFile(out.file("critic/model.safetensors")).find("model.layers.0.mlp.gate_up_proj.weight")->shape ==
        std::vector<int64_t>{96, 32});
}

TEST_CASE("Phi-3: a fused tensor of the wrong size, or a file with unfused names, is a located error") {
  model_test::TempDir out;
  const std::string directory = reference_cases().file("phi3_fused");
  const SafetensorsFile original(directory + "/model.safetensors");
  const auto write = [&](const std::string& name, const std::function<void(TensorList&)>& change) {
    TensorList tensors;
    for (const SafetensorsEntry& entry : original.entries()) tensors.emplace_back(entry.name, original.load(entry.name));
    change(tensors);
    write_safetensors_directory(out.file(name), tensors, 1 << 30);
    std::filesystem::copy_file(directory + "/config.json", out.file(name + "/config.json"));
    return out.file(name);
  };
  const std::string short_qkv = write("short", [](TensorList& tensors) {
    for (auto& [name, tensor] : tensors)
      if (name == "model.layers.1.self_attn.qkv_proj.weight") tensor = tensor.narrow(0, 0, 48);
  });
  CHECK_THROWS_WITH_AS(load_hf_model(short_qkv, ModelOptions{}),
                       (short_qkv + ": tensor \"model.layers.1.self_attn.qkv_proj.weight\" has shape [48, 32], "
                                    "config.json implies [64, 32] (q_proj [32, 32], k_proj [16, 32], v_proj [16, 32])")
                           .c_str(),
                       ModelLoadError);
  const std::string long_gate_up = write("long", [](TensorList& tensors) {
    for (auto& [name, tensor] : tensors)
      if (name == "model.layers.0.mlp.gate_up_proj.weight") tensor = torch::cat({tensor, tensor.narrow(0, 0, 1)});
  });
  CHECK_THROWS_WITH_AS(load_hf_model(long_gate_up, ModelOptions{}),
                       doctest::Contains("tensor \"model.layers.0.mlp.gate_up_proj.weight\" has shape [97, 32], "
                                         "config.json implies [96, 32] (gate_proj [48, 32], up_proj [48, 32])"),
                       ModelLoadError);
  // Llama-style names beside a Phi3 config.json: the fused tensor is what is missing.
  const std::string unfused = write("unfused", [](TensorList& tensors) {
    for (auto& [name, tensor] : tensors)
      if (name == "model.layers.0.self_attn.qkv_proj.weight") name = "model.layers.0.self_attn.q_proj.weight";
  });
  CHECK_THROWS_WITH_AS(load_hf_model(unfused, ModelOptions{}),
                       doctest::Contains("weights lack tensor \"model.layers.0.self_attn.qkv_proj.weight\" that "
                                         "config.json implies"),
                       ModelLoadError);
  // Saving refuses a state with a tensor the model does not have.
  LlamaModel model = load_hf_model(directory, ModelOptions{});
  auto state = gather_full_state(model);
  state["model.layers.0.self_attn.qkv_proj.weight"] = torch::zeros({64, 32});
  CHECK_THROWS_WITH_AS(save_hf_model(out.file("s"), model->config(), ModelHead::language_model, state),
                       doctest::Contains("\"model.layers.0.self_attn.qkv_proj.weight\" is not a parameter of this model"),
                       ModelLoadError);
}
