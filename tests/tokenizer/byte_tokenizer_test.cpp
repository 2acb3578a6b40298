// The byte-level tokenizer and load_tokenizer's builtin: names and errors.
#include <doctest/doctest.h>

#include "meshrun/tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_test_support.hpp"

namespace meshrun {
namespace {

TEST_CASE("byte tokenizer: bytes are ids, bos first with add_special") {
  auto tokenizer = make_byte_tokenizer();
  CHECK(tokenizer->vocab_size() == 259);
  CHECK(tokenizer->bos_id() == 256);
  CHECK(tokenizer->eos_id() == 257);
  CHECK(tokenizer->pad_id() == 258);
  CHECK(tokenizer->encode("Hi", true) == std::vector<int32_t>{256, 72, 105});
  CHECK(tokenizer->encode("Hi", false) == std::vector<int32_t>{72, 105});
  CHECK(tokenizer->encode("é", false) == std::vector<int32_t>{0xC3, 0xA9});
  CHECK(tokenizer->encode("", true) == std::vector<int32_t>{256});
  CHECK(tokenizer->description() == "builtin:bytes");
}

TEST_CASE("byte tokenizer: decode round-trips and shows or skips specials") {
  auto tokenizer = make_byte_tokenizer();
  const std::string text = "naïve 日本 🙂\n\t\x01";
  auto ids = tokenizer->encode(text, false);
  CHECK(tokenizer->decode(ids) == text);
  std::vector<int32_t> with_specials{256, 104, 105, 257, 258};
  CHECK(tokenizer->decode(with_specials) == "<|bos|>hi<|eos|><|pad|>");
  CHECK(tokenizer->decode(with_specials, true) == "hi");
  for (int32_t bad : {259, -1, 100000}) {
    std::vector<int32_t> ids_with_bad{65, bad};
    CHECK_THROWS_WITH_AS(tokenizer->decode(ids_with_bad), test::contains("unknown token id " + std::to_string(bad)),
                         TokenizerError);
  }
}

TEST_CASE("byte tokenizer: token_to_id and the built-in chat template") {
  auto tokenizer = make_byte_tokenizer();
  CHECK(tokenizer->token_to_id("<|eos|>") == 257);
  CHECK(tokenizer->token_to_id("A") == 65);
  CHECK_FALSE(tokenizer->token_to_id("AB").has_value());
  std::vector<ChatMessage> messages{{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}};
  CHECK(tokenizer->apply_chat_template(messages, false) ==
        "<|system|>\nBe brief.\n<|user|>\nHi\n<|assistant|>\nHello\n");
  CHECK(tokenizer->apply_chat_template({{"user", "Hi"}}, true) == "<|user|>\nHi\n<|assistant|>\n");
}

TEST_CASE("load_tokenizer: builtin names") {
  CHECK(load_tokenizer("builtin:bytes")->vocab_size() == 259);
  CHECK(load_tokenizer("builtin:tiny")->encode("a", false) == std::vector<int32_t>{97});
  CHECK_THROWS_WITH_AS(load_tokenizer("builtin:nonsense"), test::contains("builtin:nonsense"), TokenizerError);
}

TEST_CASE("load_tokenizer: a missing path is named") {
  CHECK_THROWS_WITH_AS(load_tokenizer("/nonexistent/model-dir"),
                       test::contains("/nonexistent/model-dir: no such file or directory"), TokenizerError);
}

// Lint's check resolves a source as the load does, without reading it.
TEST_CASE("tokenizer_source_problem: what load_tokenizer would not find") {
  CHECK(tokenizer_source_problem("builtin:bytes").empty());
  CHECK(tokenizer_source_problem("builtin:tiny").empty());
  CHECK(tokenizer_source_problem("builtin:nonsense").find("unknown builtin tokenizer") != std::string::npos);
  CHECK(tokenizer_source_problem("/nonexistent/model-dir") == "tokenizer /nonexistent/model-dir: no such file or directory");
  // The unit tests' hub cache (tests/main.cpp) is empty.
  CHECK(tokenizer_source_problem("org/model").find("not in the local Hugging Face cache") != std::string::npos);
  test::TempDir dir;
  dir.write("model/config.json", "{}");
  CHECK(tokenizer_source_problem(dir.file("model")).find("has neither tokenizer.json nor tokenizer.model") !=
        std::string::npos);
  CHECK_THROWS_WITH_AS(load_tokenizer(dir.file("model")), test::contains("has neither tokenizer.json"), TokenizerError);
  dir.write("model/tokenizer.json", "{}");
  CHECK(tokenizer_source_problem(dir.file("model")).empty());  // found; reading it is the load's
  dir.write("file.model", "x");
  CHECK(tokenizer_source_problem(dir.file("file.model")).empty());
}

}  // namespace
}  // namespace meshrun
