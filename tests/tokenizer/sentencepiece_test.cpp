// SentencePiece tokenizer.model files through the meshrun_sentencepiece
// module, in this test binary that also links LibTorch (the reason for the
// module), against Python's sentencepiece on unigram and BPE models trained
// here with spm_train on a generated corpus, with byte fallback.
#include <doctest/doctest.h>

#include <random>

#include "meshrun/tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_test_support.hpp"

namespace meshrun {
namespace {

using test::TempDir;

std::string corpus() {
  const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "model", "training",
                         "distributed", "language", "large", "hello", "world", "café", "naïve", "Привет", "мир",
                         "日本語", "テキスト", "data", "token", "gradient", "12", "345", "!", ",", "."};
  std::mt19937 rng(42);
  std::string text;
  for (int line = 0; line < 2000; ++line) {
    const int n = 3 + static_cast<int>(rng() % 10);
    for (int i = 0; i < n; ++i) text += std::string(i ? " " : "") + words[rng() % std::size(words)];
    text += "\n";
  }
  return text;
}

// Trains DIR/NAME.model with spm_train; returns its path.
std::string train(const TempDir& dir, const std::string& type) {
  test::write_text(dir / "corpus.txt", corpus());
  const std::string prefix = dir / type;
  const std::string command = "spm_train --input=" + test::quoted(dir / "corpus.txt") + " --model_prefix=" +
                              test::quoted(prefix) + " --model_type=" + type +
                              " --vocab_size=400 --byte_fallback=true --character_coverage=1.0"
                              " --hard_vocab_limit=false --minloglevel=2 >/dev/null 2>&1";
  REQUIRE_MESSAGE(std::system(command.c_str()) == 0, "spm_train (Debian package sentencepiece) failed");
  return prefix + ".model";
}

void check_model(const std::string& type) {
  TempDir dir;
  const std::string model = train(dir, type);
  REQUIRE(test::run_python("spm_reference.py", test::quoted(model) + " " + test::quoted(dir / "expected.json")) == 0);
  const auto expected = test::read_json(dir / "expected.json");
  auto tokenizer = load_tokenizer(model);
  CHECK(tokenizer->description() == "tokenizer.model at " + model);
  CHECK(tokenizer->vocab_size() == expected["vocab_size"].get<int32_t>());
  CHECK(tokenizer->bos_id() == expected["bos"].get<int32_t>());
  CHECK(tokenizer->eos_id() == expected["eos"].get<int32_t>());
  CHECK(tokenizer->pad_id() == tokenizer->eos_id());  // spm_train gives no pad piece by default
  CHECK(tokenizer->token_to_id("<s>") == expected["bos"].get<int32_t>());
  CHECK_FALSE(tokenizer->token_to_id("no such piece").has_value());
  bool used_byte_fallback = false;
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"].get<std::string>();
    CAPTURE(text);
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    CHECK(tokenizer->encode(text, false) == ids);
    auto with_bos = ids;
    with_bos.insert(with_bos.begin(), *tokenizer->bos_id());
    CHECK(tokenizer->encode(text, true) == with_bos);
    CHECK(tokenizer->decode(ids) == c["decoded"].get<std::string>());
    CHECK(tokenizer->decode(with_bos, true) == c["decoded"].get<std::string>());
    CHECK(tokenizer->decode(with_bos) == "<s>" + c["decoded"].get<std::string>());
    for (int32_t id : ids) used_byte_fallback = used_byte_fallback || (id >= 3 && id < 3 + 256);
  }
  CHECK(used_byte_fallback);  // the unseen characters came out as bytes
  std::vector<int32_t> bad{5, tokenizer->vocab_size()};
  CHECK_THROWS_WITH_AS(tokenizer->decode(bad), test::contains("tokenizer.model at " + model), TokenizerError);
  CHECK_THROWS_WITH_AS(tokenizer->decode(bad), test::contains("unknown token id"), TokenizerError);
}

TEST_CASE("SentencePiece unigram model agrees with Python sentencepiece") { check_model("unigram"); }

TEST_CASE("SentencePiece BPE model agrees with Python sentencepiece") { check_model("bpe"); }

TEST_CASE("SentencePiece: a model directory, its tokenizer_config.json, and broken files") {
  TempDir dir;
  const std::string model = train(dir, "unigram");
  std::filesystem::create_directories(dir / "llama2");
  std::filesystem::copy_file(model, dir / "llama2/tokenizer.model");
  test::write_text(dir / "llama2/tokenizer_config.json",
                   R"({"add_bos_token": true, "add_eos_token": true, "bos_token": {"content": "<s>"},
                       "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{{ eos_token }}{% endfor %}"})");
  // A tokenizer.json that is not byte-level BPE (Llama 2's is Metaspace
  // BPE) gives way to tokenizer.model.
  test::write_text(dir / "llama2/tokenizer.json",
                   R"({"model": {"type": "BPE", "vocab": {}, "merges": []}, "decoder": {"type": "Metaspace"}})");
  auto tokenizer = load_tokenizer(dir / "llama2");
  CHECK(tokenizer->description() == "tokenizer.model at " + (dir / "llama2") + "/tokenizer.model");
  auto ids = tokenizer->encode("hello", true);
  CHECK(ids.front() == tokenizer->bos_id());
  CHECK(ids.back() == tokenizer->eos_id());
  CHECK(tokenizer->apply_chat_template({{"user", "hi"}}, true) == "<s>[user] hi</s>");

  test::write_text(dir / "broken.model", "this is not a protobuf");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir / "broken.model"), test::contains("tokenizer.model at " + (dir / "broken.model")),
                       TokenizerError);
}

}  // namespace
}  // namespace meshrun
