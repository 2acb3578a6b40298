// Hugging Face tokenizer.json byte-level BPE in Llama 3's and Qwen2's exact
// layouts (written by make_bpe_tokenizer.py with merges trained on the spot),
// compared id for id with an independent Python implementation
// (reference_bpe.py) on multilingual text, emoji, digit and whitespace runs,
// contractions, special tokens inside text, and (Qwen2) text that NFC changes.
#include <doctest/doctest.h>

#include <chrono>

#include "meshrun/tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_test_support.hpp"

namespace meshrun {
namespace {

using test::TempDir;

struct GeneratedTokenizer {
  TempDir dir;
  std::string model_dir;
  nlohmann::ordered_json cases;

  explicit GeneratedTokenizer(const std::string& kind) : model_dir(dir / kind) {
    REQUIRE(test::run_python("make_bpe_tokenizer.py", kind + " " + test::quoted(model_dir)) == 0);
    REQUIRE(test::run_python("reference_bpe.py", test::quoted(model_dir) + " " + test::quoted(dir / "cases.json")) == 0);
    cases = test::read_json(dir / "cases.json");
    REQUIRE(cases.size() > 300);
  }
};

void check_against_reference(const Tokenizer& tokenizer, const nlohmann::ordered_json& cases) {
  size_t mismatches = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    const auto ids = tokenizer.encode(text, false);
    const auto ids_special = tokenizer.encode(text, true);
    const bool same = ids == c["ids"].get<std::vector<int32_t>>() &&
                      ids_special == c["ids_special"].get<std::vector<int32_t>>();
    if (!same && ++mismatches <= 5) {
      CAPTURE(text);
      CHECK(nlohmann::json(ids).dump() == c["ids"].dump());
      CHECK(nlohmann::json(ids_special).dump() == c["ids_special"].dump());
    }
    // Round trip, specials included: they are in the text as written (after
    // the normalizer, if any).
    const std::string decoded = c["decoded"].get<std::string>();
    if (tokenizer.decode(ids) != decoded && ++mismatches <= 5) CHECK(tokenizer.decode(ids) == decoded);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("tokenizer.json in Llama 3's layout agrees with the reference") {
  GeneratedTokenizer generated("llama3");
  auto tokenizer = load_tokenizer(generated.model_dir);
  check_against_reference(*tokenizer, generated.cases);
  CHECK(tokenizer->description() == "tokenizer.json at " + generated.model_dir + "/tokenizer.json");

  const auto bos = tokenizer->token_to_id("<|begin_of_text|>");
  REQUIRE(bos.has_value());
  CHECK(tokenizer->vocab_size() == *bos + 256);  // 256 added tokens after the model's vocabulary
  CHECK(tokenizer->bos_id() == bos);
  CHECK(tokenizer->eos_id() == tokenizer->token_to_id("<|eot_id|>"));  // from tokenizer_config.json
  CHECK(tokenizer->pad_id() == tokenizer->eos_id());
  CHECK(tokenizer->encode("hi", true).front() == *bos);

  SUBCASE("ignore_merges: a vocabulary word without a merge path is one token") {
    const auto word = tokenizer->token_to_id("Ġtokenization");
    REQUIRE(word.has_value());
    CHECK(tokenizer->encode(" tokenization", false) == std::vector<int32_t>{*word});
  }
  SUBCASE("decode with skip_special leaves the special tokens out") {
    const std::string text = "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>";
    auto ids = tokenizer->encode(text, true);
    CHECK(tokenizer->decode(ids) == "<|begin_of_text|>" + text);
    CHECK(tokenizer->decode(ids, true) == "user\n\nHi there");
  }
  SUBCASE("bytes that are not UTF-8 decode to U+FFFD, like Hugging Face") {
    auto ids = tokenizer->encode("é", false);  // 'é' is two byte tokens or one merged token
    std::vector<int32_t> first_byte{*tokenizer->token_to_id("Ã")};
    CHECK(tokenizer->decode(first_byte) == "\xEF\xBF\xBD");
    CHECK(tokenizer->decode(ids) == "é");
  }
  SUBCASE("an unknown id is an error naming the file") {
    std::vector<int32_t> ids{1, tokenizer->vocab_size()};
    CHECK_THROWS_WITH_AS(tokenizer->decode(ids), test::contains("tokenizer.json at"), TokenizerError);
    CHECK_THROWS_WITH_AS(tokenizer->decode(ids), test::contains("unknown token id"), TokenizerError);
  }
  SUBCASE("text that is not UTF-8 is refused") {
    CHECK_THROWS_WITH_AS(tokenizer->encode("ok \xFF", false), test::contains("not valid UTF-8 (byte 3)"),
                         TokenizerError);
  }
  SUBCASE("the file itself can be named") {
    auto from_file = load_tokenizer(generated.model_dir + "/tokenizer.json");
    CHECK(from_file->encode("Hello world", true) == tokenizer->encode("Hello world", true));
    CHECK(from_file->eos_id() == tokenizer->eos_id());  // tokenizer_config.json next to it is read
  }
}

TEST_CASE("tokenizer.json in Qwen2's layout agrees with the reference") {
  GeneratedTokenizer generated("qwen2");
  auto tokenizer = load_tokenizer(generated.model_dir);
  check_against_reference(*tokenizer, generated.cases);
  CHECK_FALSE(tokenizer->bos_id().has_value());  // bos_token null, no prefix
  CHECK(tokenizer->encode("hi", true) == tokenizer->encode("hi", false));
  CHECK(tokenizer->eos_id() == tokenizer->token_to_id("<|im_end|>"));
  CHECK(tokenizer->pad_id() == tokenizer->token_to_id("<|endoftext|>"));
  // Qwen2 splits digits one by one, Llama 3 in groups of three.
  const auto digits = tokenizer->encode("12345", false);
  CHECK(digits.size() == 5);
}

TEST_CASE("BPE encodes 1 MB of text quickly") {
  GeneratedTokenizer generated("llama3");
  auto tokenizer = load_tokenizer(generated.model_dir);
  std::string text;
  size_t i = 0;
  while (text.size() < (1 << 20)) {
    for (const auto& c : generated.cases) {
      text += c["text"].get<std::string>() + " " + std::to_string(i++) + " ";
      if (text.size() >= (1 << 20)) break;
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tokenizer->encode(text, false);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("1 MB in " << seconds << " s, " << ids.size() << " tokens");
  CHECK(seconds < 3.0);  // well under a second in a release build; the margin is for shared CI machines
  CHECK(tokenizer->decode(ids) == text);
}

}  // namespace
}  // namespace meshrun
