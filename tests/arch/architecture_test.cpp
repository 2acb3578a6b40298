// Architecture from config.json, presets, and parameter counts.
#include <doctest/doctest.h>

#include "meshrun/arch/architecture.hpp"
#include "tests/plan/plan_fixtures.hpp"

using namespace meshrun;
using plan_test::TempDir;

namespace {

// The config.json of meta-llama/Llama-2-7b-hf, trimmed to the keys that matter.
const char* kLlamaConfig = R"({
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 4096,
  "intermediate_size": 11008,
  "max_position_embeddings": 4096,
  "num_attention_heads": 32,
  "num_hidden_layers": 32,
  "num_key_value_heads": 32,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "float16",
  "vocab_size": 32000
})";

// The config.json of Qwen/Qwen2.5-0.5B-Instruct.
const char* kQwenConfig = R"({
  "architectures": ["Qwen2ForCausalLM"],
  "model_type": "qwen2",
  "hidden_size": 896,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rope_theta": 1000000.0,
  "tie_word_embeddings": true,
  "vocab_size": 151936
})";

}  // namespace

TEST_CASE("a Llama config.json gives the Llama-2-7b shape and its exact parameter count") {
  TempDir dir;
  dir.write("llama-7b/config.json", kLlamaConfig);
  std::string error;
  auto a = resolve_architecture((dir.path() / "llama-7b").string(), error);
  REQUIRE_MESSAGE(a, error);
  CHECK(a->name == "llama-7b");
  CHECK(a->source == "config.json at " + (dir.path() / "llama-7b" / "config.json").string());
  CHECK(a->hidden == 4096);
  CHECK(a->layers == 32);
  CHECK(a->kv_heads == 32);
  CHECK(a->head_dim() == 128);
  CHECK(a->max_position == 4096);
  CHECK_FALSE(a->tied_embeddings);
  CHECK_FALSE(a->qkv_bias);
  // Published count of Llama-2-7b.
  CHECK(a->parameters() == 6'738'415'616);
  // Value head: the 32000 × 4096 lm_head replaced by a 4096 × 1 head.
  CHECK(a->parameters_with_value_head() == 6'738'415'616 - 32000 * 4096 + 4096);
}

TEST_CASE("a Qwen2 config.json is tied and has q/k/v biases") {
  TempDir dir;
  auto file = dir.write("qwen/config.json", kQwenConfig);
  std::string error;
  auto a = architecture_from_config_json(file.string(), error);
  REQUIRE_MESSAGE(a, error);
  CHECK(a->tied_embeddings);
  CHECK(a->qkv_bias);
  CHECK(a->kv_dim() == 128);
  CHECK(a->rope_theta == 1000000.0);
  // Published count of Qwen2.5-0.5B: the embedding is shared with the lm_head.
  CHECK(a->parameters() == 494'032'768);
  CHECK(a->parameters_with_value_head() == 494'032'768 + 896);
}

TEST_CASE("a Qwen3 config.json has its own head_dim, q/k norms and the published parameter count") {
  TempDir dir;
  // The config.json of Qwen/Qwen3-0.6B, trimmed to the keys that matter.
  dir.write("qwen3/config.json", R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
      "attention_bias": false, "head_dim": 128, "hidden_size": 1024, "intermediate_size": 3072,
      "max_position_embeddings": 40960, "num_attention_heads": 16, "num_hidden_layers": 28,
      "num_key_value_heads": 8, "rope_theta": 1000000, "tie_word_embeddings": true, "vocab_size": 151936})");
  std::string error;
  auto a = resolve_architecture((dir.path() / "qwen3").string(), error);
  REQUIRE_MESSAGE(a, error);
  CHECK(a->head_dim() == 128);
  CHECK(a->qk_norm);
  CHECK(a->parameters() == 596'049'920);
  CHECK(a->parameters() == resolve_architecture("Qwen3-0.6B", error)->parameters());
}

TEST_CASE("a Phi-3 config.json (phi-4's) plans as the published phi-4") {
  TempDir dir;
  // The config.json of microsoft/phi-4, trimmed to the keys that matter.
  dir.write("phi-4/config.json", R"({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
      "attention_dropout": 0.0, "embd_pdrop": 0.0, "resid_pdrop": 0.0, "hidden_size": 5120,
      "intermediate_size": 17920, "max_position_embeddings": 16384, "num_attention_heads": 40,
      "num_hidden_layers": 40, "num_key_value_heads": 10, "rope_theta": 250000, "sliding_window": null,
      "tie_word_embeddings": false, "vocab_size": 100352})");
  std::string error;
  auto a = resolve_architecture((dir.path() / "phi-4").string(), error);
  REQUIRE_MESSAGE(a, error);
  CHECK(a->family == ModelFamily::phi3);
  CHECK(a->parameters() == 14'659'507'200);
  CHECK(a->parameters() == resolve_architecture("microsoft/phi-4", error)->parameters());
}

TEST_CASE("num_key_value_heads defaults to the attention heads") {
  TempDir dir;
  auto file = dir.write("m/config.json",
                        R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                            "intermediate_size": 176, "vocab_size": 256})");
  std::string error;
  auto a = architecture_from_config_json(file.string(), error);
  REQUIRE_MESSAGE(a, error);
  CHECK(a->kv_heads == 4);
  CHECK(a->max_position == 0);  // unknown: no context check
  CHECK(a->rope_theta == 10000.0);
  CHECK_FALSE(a->tied_embeddings);
}

TEST_CASE("bad or missing config.json is an error that says why") {
  TempDir dir;
  std::string error;

  SUBCASE("a directory without config.json") {
    std::filesystem::create_directories(dir.path() / "empty");
    CHECK_FALSE(resolve_architecture((dir.path() / "empty").string(), error));
    CHECK(error.find("no readable config.json") != std::string::npos);
  }
  SUBCASE("not JSON") {
    auto file = dir.write("broken/config.json", "{ hidden_size: ");
    CHECK_FALSE(architecture_from_config_json(file.string(), error));
    CHECK(error.find("not a JSON object") != std::string::npos);
  }
  SUBCASE("keys missing") {
    auto file = dir.write("partial/config.json", R"({"hidden_size": 64, "vocab_size": "many"})");
    CHECK_FALSE(architecture_from_config_json(file.string(), error));
    CHECK(error.find("num_hidden_layers") != std::string::npos);
    CHECK(error.find("vocab_size") != std::string::npos);
    CHECK(error.find("hidden_size") == std::string::npos);
  }
  SUBCASE("heads that do not split hidden") {
    auto file = dir.write("odd/config.json",
                          R"({"hidden_size": 100, "num_hidden_layers": 2, "num_attention_heads": 3,
                              "intermediate_size": 176, "vocab_size": 256})");
    CHECK_FALSE(architecture_from_config_json(file.string(), error));
    CHECK(error.find("attention layout") != std::string::npos);
  }
  SUBCASE("a model family meshrun does not build") {
    auto file = dir.write("gemma/config.json",
                          R"({"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 2,
                              "num_attention_heads": 4, "intermediate_size": 176, "vocab_size": 256})");
    CHECK_FALSE(architecture_from_config_json(file.string(), error));
    CHECK(error.find("model_type \"deepseek_v3\" is not supported (llama, qwen2, qwen3, mistral, phi3, olmo2, "
                     "qwen3_moe, mixtral, olmoe, gemma2, gemma3_text)") != std::string::npos);
  }
  SUBCASE("a head_dim or context length written as zero or less") {
    for (const char* key : {"head_dim", "max_position_embeddings"})
      for (const char* value : {"0", "-8"}) {
        CAPTURE(key);
        CAPTURE(value);
        auto file = dir.write(std::string("zero_") + key + value + "/config.json",
                              std::string(R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                                              "intermediate_size": 176, "vocab_size": 256, ")") +
                                  key + "\": " + value + "}");
        CHECK_FALSE(architecture_from_config_json(file.string(), error));
        CHECK(error.find(std::string(key) + " " + value) != std::string::npos);
      }
    // null is absent: the default.
    auto file = dir.write("null_head/config.json",
                          R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                              "intermediate_size": 176, "vocab_size": 256, "head_dim": null,
                              "max_position_embeddings": null})");
    auto a = architecture_from_config_json(file.string(), error);
    REQUIRE_MESSAGE(a, error);
    CHECK(a->head_dim() == 16);
    CHECK(a->max_position == 0);
  }
  SUBCASE("a file that does not exist") {
    CHECK_FALSE(architecture_from_config_json((dir.path() / "none.json").string(), error));
    CHECK(error.find("cannot read") != std::string::npos);
  }
}

TEST_CASE("presets have the documented shapes") {
  std::string error;
  auto tiny = resolve_architecture("builtin:tiny", error);
  REQUIRE(tiny);
  CHECK(tiny->source == "built-in preset");
  CHECK(tiny->hidden == 64);
  CHECK(tiny->kv_heads == 2);
  CHECK(tiny->max_position == 512);
  CHECK(tiny->tied_embeddings);
  // Per layer: q, o 64×64 each, k, v 64×32 each, MLP 3×64×176, two norms 64:
  // 12288 + 33792 + 128 = 46208; ×2 layers + 264×64 embedding (the byte
  // tokenizer's 259 ids, rounded up) + 64 final norm.
  CHECK(tiny->vocab == 264);
  CHECK(tiny->parameters() == 2 * 46208 + 16896 + 64);

  auto small = resolve_architecture("builtin:small", error);
  REQUIRE(small);
  CHECK_FALSE(small->tied_embeddings);
  // Per layer: 3×65536 attention + 3×256×688 MLP + 512 norms = 725504; ×4,
  // + 4096×256 embedding + 256 final norm + 4096×256 lm_head.
  CHECK(small->parameters() == 4 * 725504 + 1048576 + 256 + 1048576);

  CHECK_FALSE(resolve_architecture("builtin:huge", error));
  CHECK(error.find("builtin:tiny") != std::string::npos);
}

TEST_CASE("a local directory wins over the table name it is called by") {
  TempDir dir;
  dir.write("Llama-2-70b-hf/config.json", kLlamaConfig);  // really a 7B shape
  std::string error;
  auto a = resolve_architecture((dir.path() / "Llama-2-70b-hf").string(), error);
  REQUIRE(a);
  CHECK(a->hidden == 4096);
  CHECK(a->source.rfind("config.json at ", 0) == 0);
}

TEST_CASE("an empty model is an error") {
  std::string error;
  CHECK_FALSE(resolve_architecture("", error));
  CHECK(error == "no model given");
}
