// ModelConfig: config.json keys of Llama, Qwen2, Qwen3, Mistral and Phi3,
// rope_scaling and transformers 5's rope_parameters,
// errors, the written config.json read back, presets.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshrun/arch/model_config.hpp"
#include "tests/model/model_fixtures.hpp"

using namespace meshrun;

namespace {

std::string llama3_config(const std::string& scaling) {
  return R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
             "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "vocab_size": 300, "max_position_embeddings": 8192,
             "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "bos_token_id": 1, "eos_token_id": [2, 3],
             "rope_scaling": )" + scaling + "}";
}

}  // namespace

TEST_CASE("a Llama 3.1 config.json with llama3 rope scaling") {
  const ModelConfig c = model_config_from_json(
      llama3_config(R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192})"),
      "config.json");
  CHECK(c.family == ModelFamily::llama);
  CHECK(c.kv_heads == 2);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling.type == RopeScaling::Type::llama3);
  CHECK(c.rope_scaling.factor == 8.0);
  CHECK(c.rope_scaling.high_freq_factor == 4.0);
  CHECK(c.rope_scaling.original_max_position == 8192);
  CHECK(c.bos_token_id == 1);
  CHECK(c.eos_token_ids == std::vector<int64_t>{2, 3});
  CHECK_FALSE(c.qkv_bias);
}

TEST_CASE("rope_scaling: linear and dynamic take a factor; unknown types and missing keys are errors") {
  auto linear = model_config_from_json(llama3_config(R"({"type": "linear", "factor": 2})"), "c.json");
  CHECK(linear.rope_scaling.type == RopeScaling::Type::linear);
  CHECK(linear.rope_scaling.factor == 2.0);
  auto dynamic = model_config_from_json(llama3_config(R"({"type": "dynamic", "factor": 4.0})"), "c.json");
  CHECK(dynamic.rope_scaling.type == RopeScaling::Type::dynamic);
  CHECK(model_config_from_json(llama3_config("null"), "c.json").rope_scaling.type == RopeScaling::Type::none);
  CHECK_THROWS_WITH_AS(model_config_from_json(llama3_config(R"({"type": "ntk-by-parts", "factor": 4.0})"), "c.json"),
                       "c.json: rope_scaling type \"ntk-by-parts\" is not supported (linear, dynamic, llama3, yarn, "
                       "longrope)",
                       ModelConfigError);
  CHECK_THROWS_WITH_AS(model_config_from_json(llama3_config(R"({"rope_type": "llama3", "factor": 8.0})"), "c.json"),
                       doctest::Contains("needs a number \"low_freq_factor\""), ModelConfigError);
  CHECK_THROWS_WITH_AS(model_config_from_json(llama3_config(R"({"type": "linear"})"), "c.json"),
                       doctest::Contains("needs a number \"factor\""), ModelConfigError);
}

TEST_CASE("transformers 5's rope_parameters carries rope_theta and the scaling; per-layer-type ones are refused") {
  // Llama-3.2-1B-Instruct's config.json as transformers 5 saves it: no rope_theta, no rope_scaling, "dtype".
  const std::string v5 = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
      "vocab_size": 300, "max_position_embeddings": 131072, "dtype": "bfloat16",
      "rope_parameters": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                          "original_max_position_embeddings": 8192, "rope_theta": 500000.0, "rope_type": "llama3"}})";
  const ModelConfig c = model_config_from_json(v5, "v5/config.json");
  CHECK(c.rope_theta == 500000.0);
  CHECK(c.rope_scaling.type == RopeScaling::Type::llama3);
  CHECK(c.rope_scaling.factor == 32.0);
  CHECK(c.rope_scaling.original_max_position == 8192);
  CHECK(c.torch_dtype == "bfloat16");
  // Written back in the keys every transformers reads, it is the same model.
  const ModelConfig back =
      model_config_from_json(model_config_to_json(c, ModelHead::language_model, "bfloat16"), "written");
  CHECK(back.rope_theta == 500000.0);
  CHECK(back.rope_scaling.type == RopeScaling::Type::llama3);

  nlohmann::json plain = nlohmann::json::parse(v5);
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  const ModelConfig qwen_like = model_config_from_json(plain.dump(), "p.json");
  CHECK(qwen_like.rope_theta == 1000000.0);
  CHECK(qwen_like.rope_scaling.type == RopeScaling::Type::none);

  plain["rope_parameters"] = {{"rope_type", "yarn"}, {"factor", 4.0}, {"rope_theta", 1000000.0}};
  CHECK(model_config_from_json(plain.dump(), "p.json").rope_scaling.type == RopeScaling::Type::yarn);
  plain["rope_parameters"] = {{"rope_type", "xpos"}, {"factor", 4.0}, {"rope_theta", 1000000.0}};
  CHECK_THROWS_WITH_AS(model_config_from_json(plain.dump(), "p.json"),
                       "p.json: rope_parameters type \"xpos\" is not supported (linear, dynamic, llama3, yarn, longrope)",
                       ModelConfigError);
  plain["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
                              {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  CHECK_THROWS_WITH_AS(model_config_from_json(plain.dump(), "p.json"),
                       doctest::Contains("p.json: rope_parameters per layer type (\"full_attention\", ...) is not "
                                         "supported"),
                       ModelConfigError);
  plain["rope_parameters"] = "fast";
  CHECK_THROWS_WITH_AS(model_config_from_json(plain.dump(), "p.json"),
                       "p.json: rope_parameters must be an object or null", ModelConfigError);
}

TEST_CASE("Qwen2 has q/k/v biases only; Llama's attention_bias covers o_proj; Mistral keeps its window") {
  const std::string shape = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                               "num_attention_heads": 4, "vocab_size": 300)";
  auto qwen = model_config_from_json(R"({"architectures": ["Qwen2ForCausalLM"], )" + shape + "}", "q.json");
  CHECK(qwen.family == ModelFamily::qwen2);
  CHECK(qwen.qkv_bias);
  CHECK_FALSE(qwen.o_bias);
  CHECK(qwen.sliding_window == 0);  // use_sliding_window absent: full attention
  auto llama = model_config_from_json(R"({"model_type": "llama", "attention_bias": true, "mlp_bias": true, )" + shape + "}",
                                      "l.json");
  CHECK(llama.qkv_bias);
  CHECK(llama.o_bias);
  CHECK(llama.mlp_bias);
  auto mistral = model_config_from_json(R"({"model_type": "mistral", "sliding_window": 4096, )" + shape + "}", "m.json");
  CHECK(mistral.sliding_window == 4096);
  // Parameter count with every bias: 4 q/k/v/o biases of 64 and 2×128 + 64 MLP biases per layer.
  ModelConfig plain = llama;
  plain.qkv_bias = plain.o_bias = plain.mlp_bias = false;
  CHECK(llama.parameters() == plain.parameters() + 2 * (4 * 64 + 2 * 128 + 64));
}

TEST_CASE("head_dim: config.json's own sizes the heads; an odd, absurd or missing-but-needed one is refused") {
  const std::string base = R"("hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
                              "vocab_size": 300)";
  const ModelConfig wide = model_config_from_json(R"({"num_attention_heads": 4, "head_dim": 32, )" + base + "}", "h.json");
  CHECK(wide.head_dim() == 32);
  CHECK(wide.kv_dim() == 4 * 32);
  // Per layer: q and o of 64 × 128 each, k and v of 64 × 128 (kv_heads = heads) beside the MLP and norms.
  CHECK(wide.parameters() == 300 * 64 * 2 + 2 * (4 * 64 * 128 + 3 * 64 * 128 + 2 * 64) + 64);
  // The value it would have anyway is the default.
  CHECK(model_config_from_json(R"({"num_attention_heads": 4, "head_dim": 16, )" + base + "}", "h.json")
            .explicit_head_dim == 0);
  // Without hidden % heads == 0, a head_dim makes the layout.
  CHECK(model_config_from_json(R"({"num_attention_heads": 6, "head_dim": 16, )" + base + "}", "h.json").head_dim() == 16);
  CHECK_THROWS_WITH_AS(model_config_from_json(R"({"num_attention_heads": 6, )" + base + "}", "h.json"),
                       doctest::Contains("do not describe a supported attention layout (without a head_dim)"),
                       ModelConfigError);
  CHECK_THROWS_WITH_AS(model_config_from_json(R"({"num_attention_heads": 4, "head_dim": 33, )" + base + "}", "h.json"),
                       doctest::Contains("even head_dim"), ModelConfigError);
  CHECK_THROWS_WITH_AS(model_config_from_json(R"({"num_attention_heads": 4, "head_dim": -8, )" + base + "}", "h.json"),
                       doctest::Contains("h.json: head_dim -8 is not a head size meshrun builds"), ModelConfigError);
  CHECK_THROWS_WITH_AS(
      model_config_from_json(R"({"num_attention_heads": 4096, "head_dim": 4096, )" + base + "}", "h.json"),
      doctest::Contains("num_attention_heads × head_dim 16777216 is beyond any model"), ModelConfigError);
  CHECK_THROWS_WITH_AS(model_config_from_json(R"({"num_attention_heads": 64, )" + base + "}", "h.json"),
                       doctest::Contains("even head_dim"), ModelConfigError);
  CHECK_THROWS_WITH_AS(read_model_config("/nonexistent/config.json"), doctest::Contains("cannot read /nonexistent"),
                       ModelConfigError);
}

TEST_CASE("a value of the wrong type or a size beyond any model is an error naming config.json and the key") {
  const std::string base = R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "intermediate_size": 176, "vocab_size": 264)";
  CHECK_NOTHROW(model_config_from_json(base + "}", "m/config.json"));
  CHECK_NOTHROW(model_config_from_json(base + R"(, "rope_theta": null, "sliding_window": null})", "m/config.json"));
  CHECK_THROWS_WITH_AS(model_config_from_json(base + R"(, "rope_theta": "10000"})", "m/config.json"),
                       "m/config.json: \"rope_theta\" is \"10000\", not a number", ModelConfigError);
  CHECK_THROWS_WITH_AS(model_config_from_json(base + R"(, "tie_word_embeddings": "yes"})", "m/config.json"),
                       "m/config.json: \"tie_word_embeddings\" is \"yes\", not true or false", ModelConfigError);
  CHECK_THROWS_WITH_AS(model_config_from_json(R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                               "intermediate_size": 176, "vocab_size": 1099511627776})",
                                              "m/config.json"),
                       "m/config.json: vocab_size 1099511627776 is beyond any model meshrun builds (at most 16777216)",
                       ModelConfigError);
  CHECK_THROWS_WITH_AS(read_model_config("/dev/zero"), "/dev/zero is larger than 16 MiB: not a model config",
                       ModelConfigError);
  // Integers are not wrapped or truncated into something valid.
  CHECK_THROWS_WITH_AS(model_config_from_json(base + R"(, "num_key_value_heads": 18446744073709551615})", "m/config.json"),
                       doctest::Contains("\"num_key_value_heads\" is 18446744073709551615, not an integer in range"),
                       ModelConfigError);
  CHECK_THROWS_WITH_AS(model_config_from_json(base + R"(, "num_key_value_heads": 2.5})", "m/config.json"),
                       doctest::Contains("not an integer"), ModelConfigError);
  // A value nested past the JSON bound, or a long one, is named briefly, never recursed into.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK_THROWS_WITH_AS(model_config_from_json(base + R"(, "hidden_act": )" + deep + "}", "m/config.json"),
                       "m/config.json is not a JSON object", ModelConfigError);
  try {
    model_config_from_json(base + R"(, "hidden_act": [)" + std::string(100000, '1') + "]}", "m/config.json");
    FAIL("a list as hidden_act was accepted");
  } catch (const ModelConfigError& error) {
    CHECK(std::string(error.what()).size() < 200);
  }
  // What no model can run is refused where config.json is read.
  CHECK_THROWS_WITH_AS(model_config_from_json(base + R"(, "hidden_act": "gelu"})", "m/config.json"),
                       doctest::Contains("m/config.json: hidden_act \"gelu\" is not supported"), ModelConfigError);
  CHECK_THROWS_WITH_AS(
      model_config_from_json(llama3_config(R"({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 1e300})"),
                             "c.json"),
      doctest::Contains("original_max_position_embeddings 1e+300 is not a context length"), ModelConfigError);
}

TEST_CASE("Qwen3: q_norm and k_norm, its own head_dim, attention_bias for every projection; unknown types refused") {
  // Qwen/Qwen3-0.6B's config.json (shape keys).
  const std::string qwen3 = R"({"architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "head_dim": 128,
      "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072, "max_position_embeddings": 40960,
      "max_window_layers": 28, "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
      "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000,
      "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_sliding_window": false,
      "vocab_size": 151936})";
  const ModelConfig c = model_config_from_json(qwen3, "qwen3/config.json");
  CHECK(c.family == ModelFamily::qwen3);
  CHECK(c.model_type() == "qwen3");
  CHECK(c.qk_norm);
  CHECK_FALSE(c.qkv_bias);
  CHECK_FALSE(c.o_bias);
  CHECK(c.head_dim() == 128);
  CHECK(c.sliding_window == 0);
  CHECK(c.parameters() == 596'049'920);  // the published count of Qwen3-0.6B

  const auto written = nlohmann::json::parse(model_config_to_json(c, ModelHead::language_model, "bfloat16"));
  CHECK(written["architectures"][0] == "Qwen3ForCausalLM");
  CHECK(written["model_type"] == "qwen3");
  CHECK(written["head_dim"] == 128);
  CHECK(written["attention_bias"] == false);
  CHECK(written["use_sliding_window"] == false);
  const ModelConfig back = model_config_from_json(written.dump(), "written");
  CHECK(back.family == ModelFamily::qwen3);
  CHECK(back.qk_norm);
  CHECK(back.head_dim() == 128);
  CHECK(back.parameters() == c.parameters());
  CHECK(nlohmann::json::parse(model_config_to_json(c, ModelHead::value, "float32"))["architectures"][0] ==
        "Qwen3ForSequenceClassification");

  // No model_type: the architectures tell.
  nlohmann::json unnamed = nlohmann::json::parse(qwen3);
  unnamed.erase("model_type");
  CHECK(model_config_from_json(unnamed.dump(), "u.json").family == ModelFamily::qwen3);
  // attention_bias covers q, k, v and o.
  nlohmann::json biased = nlohmann::json::parse(qwen3);
  biased["attention_bias"] = true;
  const ModelConfig with_bias = model_config_from_json(biased.dump(), "b.json");
  CHECK(with_bias.qkv_bias);
  CHECK(with_bias.o_bias);

  // use_sliding_window: transformers windows the layers from max_window_layers (or those layer_types
  // marks) on; all of them is one window, none is full attention, some only is refused.
  nlohmann::json windowed = nlohmann::json::parse(qwen3);
  windowed["use_sliding_window"] = true;
  windowed["sliding_window"] = 4096;
  CHECK(model_config_from_json(windowed.dump(), "w.json").sliding_window == 0);  // max_window_layers 28 of 28
  windowed["max_window_layers"] = 0;
  const ModelConfig all_windowed = model_config_from_json(windowed.dump(), "w.json");
  CHECK(all_windowed.sliding_window == 4096);
  const auto rewritten = nlohmann::json::parse(model_config_to_json(all_windowed, ModelHead::language_model, "float32"));
  CHECK(rewritten["max_window_layers"] == 0);
  CHECK(model_config_from_json(rewritten.dump(), "r.json").sliding_window == 4096);
  windowed["max_window_layers"] = 20;
  CHECK_THROWS_WITH_AS(model_config_from_json(windowed.dump(), "w.json"),
                       doctest::Contains("w.json: use_sliding_window puts a window on 8 of 28 layers"), ModelConfigError);
  windowed["layer_types"] = nlohmann::json::array();
  for (int i = 0; i < 28; ++i) windowed["layer_types"].push_back("sliding_attention");
  CHECK(model_config_from_json(windowed.dump(), "w.json").sliding_window == 4096);  // layer_types decides

  nlohmann::json gemma2 = nlohmann::json::parse(qwen3);
  gemma2.erase("model_type");
  gemma2["architectures"] = {"DeepseekV3ForCausalLM"};
  CHECK_THROWS_WITH_AS(model_config_from_json(gemma2.dump(), "gemma/config.json"),
                       doctest::Contains("gemma/config.json: architectures [\"DeepseekV3ForCausalLM\"] names no model family"),
                       ModelConfigError);

  nlohmann::json gemma = nlohmann::json::parse(qwen3);
  gemma["model_type"] = "gemma3";
  CHECK_THROWS_WITH_AS(model_config_from_json(gemma.dump(), "g/config.json"),
                       "g/config.json: model_type \"gemma3\" is not supported (llama, qwen2, qwen3, mistral, phi3, "
                       "olmo2, qwen3_moe, mixtral, olmoe, gemma2, gemma3_text)",
                       ModelConfigError);
}

namespace {

// microsoft/Phi-3-mini-4k-instruct's config.json (every key but auto_map).
const std::string kPhi3Mini = R"({"architectures": ["Phi3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
    "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
    "model_type": "phi3", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "transformers_version": "4.40.2", "use_cache": true, "vocab_size": 32064})";

// microsoft/phi-4's.
const std::string kPhi4 = R"({"architectures": ["Phi3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 100257, "embd_pdrop": 0.0, "eos_token_id": 100265,
    "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02, "intermediate_size": 17920,
    "max_position_embeddings": 16384, "model_type": "phi3", "num_attention_heads": 40, "num_hidden_layers": 40,
    "num_key_value_heads": 10, "original_max_position_embeddings": 16384, "pad_token_id": 100349,
    "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 250000, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 100352})";

}  // namespace

TEST_CASE("Phi3: Phi-3-mini and phi-4 parse, their window on every layer, and write back as Phi3 configs") {
  const ModelConfig mini = model_config_from_json(kPhi3Mini, "mini/config.json");
  CHECK(mini.family == ModelFamily::phi3);
  CHECK(mini.model_type() == "phi3");
  CHECK(model_family_row(mini.family).fused_projections);
  CHECK(mini.sliding_window == 2047);
  CHECK(mini.head_dim() == 96);
  CHECK_FALSE(mini.tied_embeddings);
  CHECK_FALSE(mini.qkv_bias);
  CHECK(mini.rms_norm_eps == 1e-5);
  CHECK(mini.parameters() == 3'821'079'552);  // the published count of Phi-3-mini (3.8B)
  const ModelConfig phi4 = model_config_from_json(kPhi4, "phi4/config.json");
  CHECK(phi4.sliding_window == 0);
  CHECK(phi4.kv_heads == 10);
  CHECK(phi4.head_dim() == 128);
  CHECK(phi4.rope_theta == 250000);
  CHECK(phi4.parameters() == 14'659'507'200);  // the published count of phi-4 (14.7B)
  // No model_type: Phi3ForCausalLM tells.
  nlohmann::json unnamed = nlohmann::json::parse(kPhi3Mini);
  unnamed.erase("model_type");
  CHECK(model_config_from_json(unnamed.dump(), "u.json").family == ModelFamily::phi3);
  // Phi3's layers have no biases whatever attention_bias / mlp_bias say (transformers ignores them).
  nlohmann::json biased = nlohmann::json::parse(kPhi3Mini);
  biased["attention_bias"] = true;
  biased["mlp_bias"] = true;
  const ModelConfig unbiased = model_config_from_json(biased.dump(), "b.json");
  CHECK_FALSE(unbiased.qkv_bias);
  CHECK_FALSE(unbiased.o_bias);
  CHECK_FALSE(unbiased.mlp_bias);

  const auto written = nlohmann::json::parse(model_config_to_json(mini, ModelHead::language_model, "bfloat16"));
  CHECK(written["architectures"] == nlohmann::json::array({"Phi3ForCausalLM"}));
  CHECK(written["model_type"] == "phi3");
  CHECK(written["sliding_window"] == 2047);
  CHECK(written["partial_rotary_factor"] == 1.0);
  for (const char* key : {"attention_dropout", "resid_pdrop", "embd_pdrop"}) CHECK(written[key] == 0.0);
  CHECK_FALSE(written.contains("attention_bias"));  // not a Phi3Config key
  CHECK_FALSE(written.contains("use_sliding_window"));
  CHECK(written["pad_token_id"] == 32000);
  const ModelConfig back = model_config_from_json(written.dump(), "written");
  CHECK(back.family == ModelFamily::phi3);
  CHECK(back.sliding_window == 2047);
  CHECK(back.parameters() == mini.parameters());
  const auto no_window = nlohmann::json::parse(model_config_to_json(phi4, ModelHead::language_model, "bfloat16"));
  CHECK(no_window["sliding_window"].is_null());
  CHECK(model_config_from_json(no_window.dump(), "w").sliding_window == 0);
  CHECK(nlohmann::json::parse(model_config_to_json(phi4, ModelHead::value, "float32"))["architectures"][0] ==
        "Phi3ForSequenceClassification");
  // Ids the config lacks are written as null: Phi3Config's defaults (pad 32000) lie past a small vocabulary.
  ModelConfig small = model_test::small_config();
  small.family = ModelFamily::phi3;
  const auto without_ids = nlohmann::json::parse(model_config_to_json(small, ModelHead::language_model, "float32"));
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) {
    CAPTURE(key);
    REQUIRE(without_ids.contains(key));
    CHECK(without_ids[key].is_null());
  }
  CHECK_FALSE(nlohmann::json::parse(model_config_to_json(model_test::small_config(), ModelHead::language_model,
                                                         "float32")).contains("pad_token_id"));
}

TEST_CASE("Phi3: partial rotary, dropout and rope scaling the model does not build are refused, naming file and key") {
  const auto refused = [](const std::function<void(nlohmann::json&)>& change, const std::string& message) {
    nlohmann::json config = nlohmann::json::parse(kPhi3Mini);
    change(config);
    CHECK_THROWS_WITH_AS(model_config_from_json(config.dump(), "phi/config.json"), doctest::Contains(message.c_str()),
                         ModelConfigError);
  };
  // Phi-4-mini rotates 3/4 of each head.
  refused([](auto& c) { c["partial_rotary_factor"] = 0.75; },
          "phi/config.json: partial_rotary_factor 0.75 is not supported (meshrun builds 1.0)");
  refused([](auto& c) { c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 0.5}}; },
          "phi/config.json: rope_parameters.partial_rotary_factor 0.5 is not supported");
  refused([](auto& c) { c["partial_rotary_factor"] = "half"; }, "phi/config.json: \"partial_rotary_factor\" is \"half\"");
  refused([](auto& c) { c["resid_pdrop"] = 0.1; }, "phi/config.json: resid_pdrop 0.1 is not supported (meshrun builds 0.0)");
  refused([](auto& c) { c["embd_pdrop"] = 0.1; }, "phi/config.json: embd_pdrop 0.1 is not supported");
  refused([](auto& c) { c["attention_dropout"] = 0.2; }, "phi/config.json: attention_dropout 0.2 is not supported");
  // Phi3Config takes longrope only.
  for (const char* type : {"yarn", "linear", "llama3", "dynamic"}) {
    CAPTURE(type);
    refused([&](auto& c) { c["rope_scaling"] = {{"type", type}, {"factor", 2.0}}; },
            std::string("phi/config.json: rope_scaling type \"") + type +
                "\" is not supported for phi3 (its config takes longrope only)");
  }
  // The same values are accepted where they build the model meshrun has.
  nlohmann::json plain = nlohmann::json::parse(kPhi3Mini);
  plain["partial_rotary_factor"] = 1;
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e4}, {"partial_rotary_factor", 1.0}};
  CHECK(model_config_from_json(plain.dump(), "p.json").rope_scaling.type == RopeScaling::Type::none);
  // A config built in code is held to the same: no biases, longrope only.
  ModelConfig c = model_config_from_json(kPhi3Mini, "mini");
  c.qkv_bias = true;
  CHECK_THROWS_WITH_AS(c.validate("m"), "m: phi3 models have no attention or MLP biases", ModelConfigError);
  c.qkv_bias = false;
  c.rope_scaling.type = RopeScaling::Type::linear;
  c.rope_scaling.factor = 2;
  CHECK_THROWS_WITH_AS(c.validate("m"), "m: rope_scaling type \"linear\" is not supported for phi3 (its config takes "
                                        "longrope only)",
                       ModelConfigError);
  // Dropout is refused for every family: the model has none.
  nlohmann::json llama = nlohmann::json::parse(llama3_config("null"));
  llama["attention_dropout"] = 0.1;
  CHECK_THROWS_WITH_AS(model_config_from_json(llama.dump(), "l.json"),
                       doctest::Contains("l.json: attention_dropout 0.1 is not supported"), ModelConfigError);
}

TEST_CASE("the written config.json reads back to the same config and names the architecture") {
  ModelConfig c = model_test::small_config();
  c.family = ModelFamily::qwen2;
  c.qkv_bias = true;
  c.tied_embeddings = true;
  c.rope_theta = 1e6;
  c.rope_scaling.type = RopeScaling::Type::llama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  c.rope_scaling.original_max_position = 32;
  c.eos_token_ids = {7, 9};
  const std::string text = model_config_to_json(c, ModelHead::language_model, "bfloat16");
  const auto json = nlohmann::json::parse(text);
  CHECK(json["architectures"][0] == "Qwen2ForCausalLM");
  CHECK(json["model_type"] == "qwen2");
  CHECK(json["torch_dtype"] == "bfloat16");
  CHECK(json["num_key_value_heads"] == 2);
  CHECK(json["head_dim"] == 8);
  const ModelConfig back = model_config_from_json(text, "written");
  CHECK(back.family == ModelFamily::qwen2);
  CHECK(back.hidden == c.hidden);
  CHECK(back.layers == c.layers);
  CHECK(back.heads == c.heads);
  CHECK(back.kv_heads == c.kv_heads);
  CHECK(back.intermediate == c.intermediate);
  CHECK(back.vocab == c.vocab);
  CHECK(back.max_position == c.max_position);
  CHECK(back.tied_embeddings);
  CHECK(back.qkv_bias);
  CHECK_FALSE(back.o_bias);
  CHECK(back.rms_norm_eps == c.rms_norm_eps);
  CHECK(back.rope_theta == 1e6);
  CHECK(back.rope_scaling.type == RopeScaling::Type::llama3);
  CHECK(back.rope_scaling.original_max_position == 32);
  CHECK(back.eos_token_ids == std::vector<int64_t>{7, 9});
  CHECK(back.torch_dtype == "bfloat16");

  const auto value = nlohmann::json::parse(model_config_to_json(model_test::small_config(), ModelHead::value, "float32"));
  CHECK(value["architectures"][0] == "LlamaForSequenceClassification");
  CHECK(value["num_labels"] == 1);
  CHECK(value["rope_scaling"].is_null());
}

TEST_CASE("presets cover the byte tokenizer's 259 ids and split over tp 2, 4 and 8") {
  for (const auto& name : builtin_model_names()) {
    auto c = builtin_model_config(name);
    REQUIRE(c);
    CHECK(c->vocab >= 259);
    CHECK(c->vocab % 8 == 0);
    CHECK(c->eos_token_ids == std::vector<int64_t>{257});
  }
  CHECK(builtin_model_config("builtin:tiny")->vocab == 264);
  const auto phi3 = builtin_model_config("builtin:tiny-phi3");
  REQUIRE(phi3);
  CHECK(phi3->family == ModelFamily::phi3);
  CHECK(phi3->sliding_window == 32);
  CHECK_FALSE(phi3->tied_embeddings);
  CHECK_FALSE(builtin_model_config("builtin:huge"));
}

TEST_CASE("generation stops at the tokenizer's eos and the model's eos_token_id, config.json then generation_config.json") {
  model_test::TempDir dir;
  // Qwen2.5-Math-1.5B: the tokenizer's eos is <|endoftext|> (151643); chat turns end with <|im_end|> (151645).
  dir.write("qwen/config.json", R"({"eos_token_id": 151643})");
  dir.write("qwen/generation_config.json", R"({"eos_token_id": [151645, 151643], "bos_token_id": 151643})");
  CHECK(generation_stop_ids(dir.file("qwen"), 151643) == std::vector<int64_t>{151643, 151645});
  CHECK(generation_stop_ids(dir.file("qwen"), std::nullopt) == std::vector<int64_t>{151643, 151645});
  dir.write("plain/config.json", R"({"hidden_size": 8})");
  CHECK(generation_stop_ids(dir.file("plain"), 7) == std::vector<int64_t>{7});
  CHECK(generation_stop_ids("builtin:tiny", 257) == std::vector<int64_t>{257});
  dir.write("bad/generation_config.json", R"({"eos_token_id": ["<|im_end|>"]})");
  CHECK_THROWS_WITH_AS(generation_stop_ids(dir.file("bad"), 1),
                       doctest::Contains("generation_config.json: eos_token_id [\"<|im_end|>\"] is not a token id"),
                       ModelConfigError);
  dir.write("negative/config.json", R"({"eos_token_id": -1})");
  CHECK_THROWS_AS(generation_stop_ids(dir.file("negative"), 1), ModelConfigError);
}

// A trained model's folder gets the base's generation_config.json (its
// sampling defaults and chat stop ids), else one derived from config.json.
TEST_CASE("generation_config.json of a trained model: the base model's, else derived from its config") {
  model_test::TempDir dir;
  const std::string base_text = R"({"eos_token_id": [151645, 151643], "temperature": 0.7, "top_p": 0.8})";
  dir.write("base/generation_config.json", base_text);
  ModelConfig config = model_test::small_config();
  config.bos_token_id = 1;
  config.eos_token_ids = {2, 3};
  CHECK(generation_config_json(dir.file("base"), config) == base_text);
  const auto derived = nlohmann::json::parse(generation_config_json(dir.file("no-generation-config"), config));
  CHECK(derived["_from_model_config"] == true);
  CHECK(derived["bos_token_id"] == 1);
  CHECK(derived["eos_token_id"] == nlohmann::json::array({2, 3}));
  CHECK_FALSE(derived.contains("pad_token_id"));
  config.eos_token_ids = {2};
  CHECK(nlohmann::json::parse(generation_config_json("builtin:tiny", config))["eos_token_id"] == 2);
  ModelConfig no_ids = model_test::small_config();
  no_ids.bos_token_id.reset();
  no_ids.eos_token_ids.clear();
  no_ids.pad_token_id.reset();
  CHECK(generation_config_json("builtin:tiny", no_ids).empty());
  dir.write("broken/generation_config.json", "[1, 2]");
  CHECK_THROWS_WITH_AS(generation_config_json(dir.file("broken"), config),
                       doctest::Contains("generation_config.json is not a JSON object"), ModelConfigError);
}

namespace {

nlohmann::json phi3_longrope(std::size_t entries) {
  nlohmann::json config = nlohmann::json::parse(kPhi3Mini);
  config["max_position_embeddings"] = 131072;
  config["original_max_position_embeddings"] = 4096;
  config["rope_scaling"] = {{"type", "longrope"},
                            {"short_factor", std::vector<double>(entries, 1.05)},
                            {"long_factor", std::vector<double>(entries, 3.5)}};
  return config;
}

}  // namespace

TEST_CASE("rope_scaling yarn: Qwen's and DeepSeek's keys, their defaults and the scale on cos and sin") {
  // Qwen2.5 / Qwen3's model cards: factor 4 over an original context of 32768.
  const ModelConfig qwen = model_config_from_json(
      llama3_config(R"({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})"), "c.json");
  CHECK(qwen.rope_scaling.type == RopeScaling::Type::yarn);
  CHECK(qwen.rope_scaling.factor == 4.0);
  CHECK(qwen.rope_original_context() == 32768);
  CHECK(qwen.rope_scaling.beta_fast == 32.0);
  CHECK(qwen.rope_scaling.beta_slow == 1.0);
  CHECK(qwen.rope_scaling.truncate);
  CHECK(qwen.rope_attention_factor() == doctest::Approx(0.1 * std::log(4.0) + 1.0));
  // Without original_max_position_embeddings the context is max_position_embeddings; mscale / mscale_all_dim
  // give the scale as their ratio; an explicit attention_factor wins.
  const ModelConfig deepseek = model_config_from_json(
      llama3_config(R"({"rope_type": "yarn", "factor": 40, "beta_fast": 0, "beta_slow": 2, "mscale": 1.0,
                        "mscale_all_dim": 0.707, "truncate": false})"),
      "c.json");
  CHECK(deepseek.rope_original_context() == 8192);
  CHECK(deepseek.rope_scaling.beta_fast == 32.0);  // transformers reads `beta_fast or 32`
  CHECK(deepseek.rope_scaling.beta_slow == 2.0);
  CHECK_FALSE(deepseek.rope_scaling.truncate);
  CHECK(deepseek.rope_attention_factor() ==
        doctest::Approx((0.1 * std::log(40.0) + 1.0) / (0.1 * 0.707 * std::log(40.0) + 1.0)));
  CHECK(model_config_from_json(llama3_config(R"({"type": "yarn", "factor": 2, "attention_factor": 0.9})"), "c.json")
            .rope_attention_factor() == 0.9);
  CHECK(model_config_from_json(llama3_config(R"({"type": "yarn", "factor": 1})"), "c.json").rope_attention_factor() ==
        1.0);
  // Errors name the file and the key.
  const auto refused = [](const std::string& scaling, const std::string& message) {
    CAPTURE(scaling);
    CHECK_THROWS_WITH_AS(model_config_from_json(llama3_config(scaling), "c.json"), message.c_str(), ModelConfigError);
  };
  refused(R"({"type": "yarn"})", "c.json: rope_scaling of type yarn needs a number \"factor\"");
  refused(R"({"type": "yarn", "factor": 4, "beta_fast": "fast"})",
          "c.json: rope_scaling.beta_fast is \"fast\", not a number");
  refused(R"({"type": "yarn", "factor": 4, "beta_slow": -1})",
          "c.json: yarn rope_scaling needs positive beta_fast and beta_slow");
  refused(R"({"type": "yarn", "factor": 4, "attention_factor": 0})",
          "c.json: rope_scaling attention_factor must be positive");
  refused(R"({"type": "yarn", "factor": 4, "original_max_position_embeddings": 1e300})",
          "c.json: rope_scaling original_max_position_embeddings 1e+300 is not a context length");
  refused(R"({"type": "yarn", "factor": 4, "truncate": "yes"})", "c.json: \"truncate\" is \"yes\", not true or false");
  nlohmann::json low_theta = nlohmann::json::parse(llama3_config(R"({"type": "yarn", "factor": 4})"));
  low_theta["rope_theta"] = 1.0;
  CHECK_THROWS_WITH_AS(model_config_from_json(low_theta.dump(), "c.json"), "c.json: yarn rope_scaling needs rope_theta > 1",
                       ModelConfigError);
  nlohmann::json unknown_context = nlohmann::json::parse(llama3_config(R"({"type": "yarn", "factor": 4})"));
  unknown_context.erase("max_position_embeddings");
  CHECK_THROWS_WITH_AS(model_config_from_json(unknown_context.dump(), "c.json"),
                       "c.json: yarn rope_scaling needs original_max_position_embeddings or max_position_embeddings",
                       ModelConfigError);
}

TEST_CASE("rope_scaling longrope: Phi-3 128k's lists, its top-level original context and the scale it implies") {
  const ModelConfig phi = model_config_from_json(phi3_longrope(48).dump(), "phi/config.json");  // head_dim 96
  CHECK(phi.rope_scaling.type == RopeScaling::Type::longrope);
  CHECK(phi.rope_scaling.short_factor.size() == 48);
  CHECK(phi.rope_scaling.long_factor[0] == 3.5);
  CHECK(phi.rope_original_context() == 4096);
  CHECK(phi.rope_scaling.factor == 32.0);  // 131072 / 4096
  CHECK(phi.rope_attention_factor() == doctest::Approx(std::sqrt(1 + std::log(32.0) / std::log(4096.0))));
  // "su", the name of Phi-3's first files; Phi3Config's default original context (4096) when the key is absent.
  nlohmann::json su = phi3_longrope(48);
  su["rope_scaling"]["type"] = "su";
  su.erase("original_max_position_embeddings");
  const ModelConfig from_su = model_config_from_json(su.dump(), "phi/config.json");
  CHECK(from_su.rope_scaling.type == RopeScaling::Type::longrope);
  CHECK(from_su.rope_original_context() == 4096);
  // transformers 5's rope_parameters may carry the original context inside: it wins over Phi3Config's default.
  nlohmann::json inside = phi3_longrope(48);
  inside.erase("original_max_position_embeddings");
  inside["rope_scaling"]["original_max_position_embeddings"] = 8192;
  inside["rope_scaling"]["factor"] = 16.0;
  const ModelConfig from_inside = model_config_from_json(inside.dump(), "phi/config.json");
  CHECK(from_inside.rope_original_context() == 8192);
  CHECK(from_inside.rope_scaling.factor == 16.0);
  // Other families read the original context from rope_scaling and the factor as given.
  const ModelConfig llama = model_config_from_json(
      llama3_config(R"({"type": "longrope", "factor": 2.0, "original_max_position_embeddings": 2048,
                        "short_factor": [1, 1, 1, 1, 1, 1, 1, 1], "long_factor": [1, 2, 3, 4, 5, 6, 7, 8]})"),
      "c.json");  // head_dim 16
  CHECK(llama.rope_original_context() == 2048);
  CHECK(llama.rope_scaling.factor == 2.0);
  CHECK(llama.rope_attention_factor() == doctest::Approx(std::sqrt(1 + std::log(2.0) / std::log(2048.0))));
  // Without a factor, transformers takes the context's growth: 8192 / 2048.
  const ModelConfig unscaled = model_config_from_json(
      llama3_config(R"({"type": "longrope", "original_max_position_embeddings": 2048,
                        "short_factor": [1, 1, 1, 1, 1, 1, 1, 1], "long_factor": [1, 2, 3, 4, 5, 6, 7, 8]})"),
      "c.json");
  CHECK(unscaled.rope_scaling.factor == 4.0);
  CHECK(unscaled.rope_attention_factor() == doctest::Approx(std::sqrt(1 + std::log(4.0) / std::log(2048.0))));
  // A list that does not cover the head, or holds what is not a positive number.
  CHECK_THROWS_WITH_AS(model_config_from_json(phi3_longrope(47).dump(), "phi/config.json"),
                       "phi/config.json: longrope rope_scaling short_factor has 47 entries; head_dim 96 needs 48",
                       ModelConfigError);
  nlohmann::json bad = phi3_longrope(48);
  bad["rope_scaling"]["long_factor"][5] = 0.0;
  CHECK_THROWS_WITH_AS(model_config_from_json(bad.dump(), "phi/config.json"),
                       "phi/config.json: longrope rope_scaling long_factor holds 0.0, not a positive number",
                       ModelConfigError);
  bad["rope_scaling"]["long_factor"][5] = "x";
  CHECK_THROWS_WITH_AS(model_config_from_json(bad.dump(), "phi/config.json"),
                       "phi/config.json: rope_scaling.long_factor holds \"x\", not a number", ModelConfigError);
  bad["rope_scaling"].erase("long_factor");
  CHECK_THROWS_WITH_AS(model_config_from_json(bad.dump(), "phi/config.json"),
                       "phi/config.json: rope_scaling of type longrope needs a list of numbers \"long_factor\"",
                       ModelConfigError);
  bad = phi3_longrope(48);
  bad["original_max_position_embeddings"] = "4k";
  CHECK_THROWS_WITH_AS(model_config_from_json(bad.dump(), "phi/config.json"),
                       "phi/config.json: original_max_position_embeddings is \"4k\", not a number", ModelConfigError);
}

TEST_CASE("yarn and longrope configs are written back with the keys they were read with") {
  // Phi3Config of transformers 4.4x takes exactly type, short_factor and long_factor; the original context
  // stays at the top level.
  const ModelConfig phi = model_config_from_json(phi3_longrope(48).dump(), "phi/config.json");
  const auto phi_json = nlohmann::json::parse(model_config_to_json(phi, ModelHead::language_model, "bfloat16"));
  CHECK(phi_json["rope_scaling"].size() == 3);
  CHECK(phi_json["rope_scaling"]["type"] == "longrope");
  CHECK(phi_json["original_max_position_embeddings"] == 4096);
  const ModelConfig phi_back = model_config_from_json(phi_json.dump(), "back");
  CHECK(phi_back.rope_scaling.long_factor == phi.rope_scaling.long_factor);
  CHECK(phi_back.rope_scaling.factor == phi.rope_scaling.factor);
  CHECK(phi_back.rope_attention_factor() == phi.rope_attention_factor());

  // yarn without original_max_position_embeddings is written without it (transformers would otherwise take
  // max_position_embeddings / it as the factor); the keys it was given come back.
  for (const char* scaling : {R"({"type": "yarn", "factor": 4.0})",
                              R"({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024,
                                  "beta_fast": 16, "mscale": 1, "mscale_all_dim": 0.5, "truncate": false,
                                  "attention_factor": 1.25})"}) {
    CAPTURE(scaling);
    const ModelConfig c = model_config_from_json(llama3_config(scaling), "c.json");
    const auto written = nlohmann::json::parse(model_config_to_json(c, ModelHead::language_model, "float32"));
    CHECK(written["rope_scaling"]["rope_type"] == "yarn");
    CHECK(written["rope_scaling"].contains("original_max_position_embeddings") ==
          (c.rope_scaling.original_max_position > 0));
    const ModelConfig back = model_config_from_json(written.dump(), "back");
    CHECK(back.rope_original_context() == c.rope_original_context());
    CHECK(back.rope_scaling.beta_fast == c.rope_scaling.beta_fast);
    CHECK(back.rope_scaling.truncate == c.rope_scaling.truncate);
    CHECK(back.rope_scaling.mscale == c.rope_scaling.mscale);
    CHECK(back.rope_attention_factor() == c.rope_attention_factor());
  }
}
