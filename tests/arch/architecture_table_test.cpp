// The built-in table of public models: name matching and published shapes.
#include <doctest/doctest.h>

#include "meshrun/arch/architecture.hpp"

using namespace meshrun;

namespace {

Architecture lookup(const std::string& name) {
  std::string error;
  auto a = resolve_architecture(name, error);
  INFO(name << ": " << error);
  REQUIRE(a);
  return *a;
}

}  // namespace

TEST_CASE("names match case-insensitively after the last '/', ignoring variant words") {
  for (const char* name : {"meta-llama/Llama-2-7b-hf", "Llama-2-7b", "llama-2-7b-chat-hf",
                           "/models/cache/meta-llama/LLAMA-2-7B-CHAT"}) {
    Architecture a = lookup(name);
    CHECK(a.name == "Llama-2-7b");
    CHECK(a.source.rfind("built-in table", 0) == 0);  // hub-style names add "; not in the local Hugging Face cache"
  }
  CHECK(lookup("meta-llama/Meta-Llama-3-8B-Instruct").name == "Llama-3-8B");
  CHECK(lookup("meta-llama/Llama-3.1-70B-Instruct").name == "Llama-3.1-70B");
  CHECK(lookup("meta-llama/Meta-Llama-3.1-8B").name == "Llama-3.1-8B");
  CHECK(lookup("Qwen/Qwen2.5-7B-Instruct").name == "Qwen2.5-7B");
  CHECK(lookup("qwen2.5-0.5b").name == "Qwen2.5-0.5B");
  CHECK(lookup("mistralai/Mistral-7B-Instruct-v0.1").name == "Mistral-7B-v0.1");
  CHECK(lookup("mistralai/Mistral-7B").name == "Mistral-7B-v0.1");
}

TEST_CASE("unknown names fail with the list of known ones") {
  std::string error;
  CHECK_FALSE(resolve_architecture("openai-community/gpt2", error));
  CHECK(error.find("unknown model \"openai-community/gpt2\"") != std::string::npos);
  CHECK(error.find("Llama-2-70b") != std::string::npos);
  CHECK(error.find("builtin:tiny") != std::string::npos);
  // A size we do not have must not match a neighbour.
  CHECK_FALSE(resolve_architecture("Llama-2-8b", error));
  CHECK_FALSE(resolve_architecture("Qwen2.5-7", error));
}

TEST_CASE("every name the table lists resolves to itself") {
  for (const auto& name : known_architecture_names()) CHECK(lookup(name).name == name);
  CHECK(known_architecture_names().size() == 36);  // 5 presets and 24 public models
}

TEST_CASE("published parameter counts") {
  CHECK(lookup("Llama-2-7b").parameters() == 6'738'415'616);
  CHECK(lookup("Llama-2-13b").parameters() == 13'015'864'320);
  CHECK(lookup("Llama-2-70b").parameters() == 68'976'648'192);
  CHECK(lookup("Llama-3-8B").parameters() == 8'030'261'248);
  CHECK(lookup("Llama-3-70B").parameters() == 70'553'706'496);
  CHECK(lookup("Qwen2.5-0.5B").parameters() == 494'032'768);
  CHECK(lookup("Qwen2.5-7B").parameters() == 7'615'616'512);
  CHECK(lookup("Mistral-7B-v0.1").parameters() == 7'241'732'096);
  // Qwen3: heads of 128 wider than hidden / heads, and q/k norms.
  CHECK(lookup("Qwen3-0.6B").parameters() == 596'049'920);
  CHECK(lookup("Qwen3-8B").parameters() == 8'190'735'360);
  CHECK(lookup("Qwen/Qwen3-0.6B").head_dim() == 128);
  CHECK(lookup("Qwen3-0.6B").qk_norm);
  // Phi-3: fused projections in its files, the same parameters; Phi-3-mini's window on every layer.
  CHECK(lookup("Phi-3-mini-4k-instruct").parameters() == 3'821'079'552);
  CHECK(lookup("phi-4").parameters() == 14'659'507'200);
  CHECK(lookup("microsoft/Phi-3-mini-4k-instruct").sliding_window == 2047);
  CHECK(lookup("microsoft/phi-4").name == "phi-4");
  CHECK(lookup("microsoft/phi-4").head_dim() == 128);
  CHECK(lookup("microsoft/phi-4").family == ModelFamily::phi3);
  CHECK(lookup("Mistral-7B-v0.1").sliding_window == 4096);
}

TEST_CASE("published shapes") {
  Architecture l70 = lookup("Llama-2-70b");
  CHECK(l70.hidden == 8192);
  CHECK(l70.layers == 80);
  CHECK(l70.heads == 64);
  CHECK(l70.kv_heads == 8);
  CHECK(l70.intermediate == 28672);
  CHECK(l70.vocab == 32000);
  CHECK(l70.max_position == 4096);

  Architecture l3 = lookup("Llama-3-8B");
  CHECK(l3.vocab == 128256);
  CHECK(l3.rope_theta == 500000);
  CHECK(l3.max_position == 8192);
  CHECK(lookup("Llama-3.1-8B").max_position == 131072);

  Architecture q = lookup("Qwen2.5-1.5B");
  CHECK(q.tied_embeddings);
  CHECK(q.qkv_bias);
  CHECK(q.kv_heads == 2);
  CHECK_FALSE(lookup("Qwen2.5-72B").tied_embeddings);
  CHECK(lookup("Qwen2.5-72B").intermediate == 29568);
}
