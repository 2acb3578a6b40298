// Broken tokenizer.json files: each error names the file and what is wrong.
#include <doctest/doctest.h>

#include <filesystem>

#include "meshrun/tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_test_support.hpp"

namespace meshrun {
namespace {

using json = nlohmann::ordered_json;
using test::TempDir;

json minimal_tokenizer() {
  json vocab = json::object();
  vocab["a"] = 0;
  vocab["b"] = 1;
  vocab["ab"] = 2;
  vocab["Ġ"] = 3;
  return json{{"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
              {"post_processor", nullptr},
              {"decoder", {{"type", "ByteLevel"}}},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({"a b"})}}}};
}

std::string write_tokenizer(const TempDir& dir, const std::string& text) {
  const std::string path = dir / "tokenizer.json";
  test::write_text(path, text);
  return path;
}

void check_error(const std::string& text, const std::string& expected) {
  TempDir dir;
  const std::string path = write_tokenizer(dir, text);
  CAPTURE(text);
  CHECK_THROWS_WITH_AS(load_tokenizer(path), test::contains("tokenizer.json at " + path), TokenizerError);
  CHECK_THROWS_WITH_AS(load_tokenizer(path), test::contains(expected), TokenizerError);
}

TEST_CASE("a minimal byte-level BPE tokenizer.json loads") {
  TempDir dir;
  auto tokenizer = load_tokenizer(write_tokenizer(dir, minimal_tokenizer().dump()));
  CHECK(tokenizer->encode("ab", false) == std::vector<int32_t>{2});
  CHECK(tokenizer->encode("ba", true) == std::vector<int32_t>{1, 0});
  CHECK(tokenizer->vocab_size() == 4);
}

TEST_CASE("malformed tokenizer.json files are named with what is wrong") {
  check_error("{\"model\": ", "not valid JSON");
  check_error("[1, 2]", "not a JSON object");
  json t = minimal_tokenizer();
  t.erase("model");
  check_error(t.dump(), "no \"model\" section");

  t = minimal_tokenizer();
  t["model"]["type"] = "WordPiece";
  check_error(t.dump(), "model type \"WordPiece\" is not supported");

  t = minimal_tokenizer();
  t["model"]["merges"] = json::array({"a b", "ab c"});
  check_error(t.dump(), "merge 1 (\"ab c\") names \"c\", which is not in model.vocab");

  t = minimal_tokenizer();
  t["model"]["merges"] = json::array({json::array({"b", "a"})});
  check_error(t.dump(), "names \"ba\", which is not in model.vocab");

  t = minimal_tokenizer();
  t["model"]["merges"] = json::array({"a b c"});
  check_error(t.dump(), "is not two tokens separated by one space");

  t = minimal_tokenizer();
  t["model"]["vocab"]["b"] = -4;
  check_error(t.dump(), "model.vocab[\"b\"] is not a non-negative integer id");

  // A sparse id sizes the token tables: refused before they are allocated
  // (fuzzing found 2^31 - 1 asking for 64 GB).
  t = minimal_tokenizer();
  t["model"]["vocab"]["b"] = 2147483647;
  check_error(t.dump(), "model.vocab[\"b\"] has id 2147483647, past the largest meshrun accepts (16777215)");
  t = minimal_tokenizer();
  t["added_tokens"] = json::array({{{"id", 16777216}, {"content", "<big>"}, {"special", true}}});
  check_error(t.dump(), "added token \"<big>\" has id 16777216, past the largest meshrun accepts");

  t = minimal_tokenizer();
  t["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  check_error(t.dump(), "the pre-tokenizer regex does not compile");

  t = minimal_tokenizer();
  t["pre_tokenizer"] = {{"type", "Whitespace"}};
  check_error(t.dump(), "pre_tokenizer type \"Whitespace\" is not supported");

  t = minimal_tokenizer();
  t["decoder"] = {{"type", "Metaspace"}};
  check_error(t.dump(), "decoder \"Metaspace\" is not supported");

  t = minimal_tokenizer();
  t["added_tokens"] = json::array({{{"content", "<x>"}}});
  check_error(t.dump(), "an added token without an integer \"id\"");

  t = minimal_tokenizer();
  t["model"]["ignore_merges"] = "yes";
  check_error(t.dump(), "type must be boolean");
}

TEST_CASE("post-processor ids outside the vocabulary are refused, whichever processor names them") {
  for (const char* type : {"BertProcessing", "RobertaProcessing"}) {
    for (const json& id : {json(99999999), json(-1), json(99999999999), json(4)}) {
      json t = minimal_tokenizer();
      t["post_processor"] = {{"type", type}, {"cls", {"a", id}}, {"sep", {"b", 1}}};
      check_error(t.dump(), "post_processor cls has id " + id.dump() + ", which is not in the vocabulary");
      t["post_processor"] = {{"type", type}, {"cls", {"a", 0}}, {"sep", {"b", id}}};
      check_error(t.dump(), "post_processor sep has id " + id.dump() + ", which is not in the vocabulary");
    }
  }
  json t = minimal_tokenizer();
  t["post_processor"] = {{"type", "BertProcessing"}, {"cls", {"a", 0}}, {"sep", {"b", 1}}};
  TempDir dir;
  CHECK(load_tokenizer(write_tokenizer(dir, t.dump()))->encode("ab", true) == std::vector<int32_t>{0, 2, 1});
}

TEST_CASE("a pre_tokenizer setting of the wrong type names the setting") {
  json t = minimal_tokenizer();
  t["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", 3}};
  check_error(t.dump(), "pre_tokenizer Split \"behavior\" is 3, not a string");
  t["pre_tokenizer"] = {{"type", "ByteLevel"}, {"use_regex", "yes"}};
  check_error(t.dump(), "pre_tokenizer ByteLevel \"use_regex\" is \"yes\", not true or false");
}

TEST_CASE("a pre-tokenizer regex that backtracks without bound is stopped, naming the file") {
  json t = minimal_tokenizer();
  t["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {{{"type", "Split"}, {"pattern", {{"Regex", "(a|aa)+$"}}}, {"behavior", "Isolated"}},
                                           {{"type", "ByteLevel"}, {"use_regex", false}}}}};
  TempDir dir;
  const std::string path = write_tokenizer(dir, t.dump());
  auto tokenizer = load_tokenizer(path);
  CHECK_THROWS_WITH_AS(tokenizer->encode(std::string(3000, 'a') + "b", false),
                       test::contains("tokenizer.json at " + path + ": the pre-tokenizer regex backtracks past its limits"),
                       TokenizerError);
}

TEST_CASE("an added token's flag of the wrong type names the flag") {
  json t = minimal_tokenizer();
  t["added_tokens"] = json::array({{{"id", 0}, {"content", "a"}, {"special", "yes"}}});
  check_error(t.dump(), "added token \"a\": \"special\" is \"yes\", not true or false");
}

TEST_CASE("tokenizer_config.json problems name that file") {
  TempDir dir;
  write_tokenizer(dir, minimal_tokenizer().dump());
  test::write_text(dir / "tokenizer_config.json", "{\"eos_token\": \"</s>\"}");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path().string()),
                       test::contains("tokenizer_config.json at " + (dir / "tokenizer_config.json") +
                                         ": eos_token \"</s>\" is not a token"),
                       TokenizerError);
  test::write_text(dir / "tokenizer_config.json", "{\"chat_template\": \"{% if %}\"}");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path().string()), test::contains("chat template line 1"),
                       TokenizerError);
  test::write_text(dir / "tokenizer_config.json", "not json");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path().string()), test::contains("not valid JSON"), TokenizerError);
  // Past its bound (a sparse file: no disk, but 65 MiB to read).
  std::filesystem::resize_file(dir / "tokenizer_config.json", std::uintmax_t{65} << 20);
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path().string()),
                       test::contains("tokenizer_config.json at " + (dir / "tokenizer_config.json") +
                                      ": is larger than 64 MiB"),
                       TokenizerError);
}

TEST_CASE("a model directory without tokenizer files is named") {
  TempDir dir;
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.path().string()),
                       test::contains("has neither tokenizer.json nor tokenizer.model"), TokenizerError);
}

TEST_CASE("pre-tokenizer Split behaviors and Digits follow Hugging Face") {
  // Every piece becomes a single id through ignore_merges when the vocabulary
  // holds it, so the ids show where the pre-tokenizer cut.
  TempDir dir;
  json t = minimal_tokenizer();
  json vocab = json::object();
  for (const char* token : {"the-", "final-", "-", "countdown", "the", "final", "--", "1", "2", "12", "3", "x",
                            "the-final", "-final", "-countdown", "Ġ"})
    vocab[token] = static_cast<int>(vocab.size());
  t["model"]["vocab"] = vocab;
  t["model"]["merges"] = json::array();
  t["model"]["ignore_merges"] = true;
  auto ids_of = [&](json pre_tokenizer, const std::string& text) {
    t["pre_tokenizer"] = json{{"type", "Sequence"},
                              {"pretokenizers", json::array({pre_tokenizer, {{"type", "ByteLevel"}, {"use_regex", false}}})}};
    auto tokenizer = load_tokenizer(write_tokenizer(dir, t.dump()));
    std::vector<std::string> tokens;
    for (int32_t id : tokenizer->encode(text, false))
      for (auto it = vocab.begin(); it != vocab.end(); ++it)
        if (it.value() == id) tokens.push_back(it.key());
    return tokens;
  };
  auto split = [](const char* behavior) {
    return json{{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", false}};
  };
  using V = std::vector<std::string>;
  CHECK(ids_of(split("MergedWithPrevious"), "the-final--countdown") == V{"the-", "final-", "-", "countdown"});
  CHECK(ids_of(split("MergedWithNext"), "the-final--countdown") == V{"the", "-final", "-", "-countdown"});
  CHECK(ids_of(split("Isolated"), "the-final--countdown") == V{"the", "-", "final", "-", "-", "countdown"});
  CHECK(ids_of(split("Removed"), "the-final--countdown") == V{"the", "final", "countdown"});
  CHECK(ids_of(split("Contiguous"), "the-final--countdown") == V{"the", "-", "final", "--", "countdown"});
  CHECK(ids_of({{"type", "Digits"}, {"individual_digits", true}}, "x123") == V{"x", "1", "2", "3"});
  CHECK(ids_of({{"type", "Digits"}, {"individual_digits", false}}, "x12") == V{"x", "12"});
}

TEST_CASE("added tokens: longest match, lstrip/rstrip, non-special ones kept in decode") {
  TempDir dir;
  json t = minimal_tokenizer();
  t["added_tokens"] = json::array({
      {{"id", 4}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
      {{"id", 5}, {"content", "<s>x"}, {"special", true}, {"normalized", false}},
      {{"id", 6}, {"content", "[M]"}, {"special", false}, {"lstrip", true}, {"rstrip", true}, {"normalized", true}},
  });
  auto tokenizer = load_tokenizer(write_tokenizer(dir, t.dump()));
  CHECK(tokenizer->vocab_size() == 7);
  CHECK(tokenizer->encode("a<s>xb<s>", false) == std::vector<int32_t>{0, 5, 1, 4});
  CHECK(tokenizer->encode("a  [M]  b", false) == std::vector<int32_t>{0, 6, 1});
  std::vector<int32_t> ids{0, 4, 6, 1};
  CHECK(tokenizer->decode(ids) == "a<s>[M]b");
  CHECK(tokenizer->decode(ids, true) == "a[M]b");
}

}  // namespace
}  // namespace meshrun
