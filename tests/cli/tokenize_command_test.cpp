// `meshrun tokenize`: encoding and decoding from the command line, through
// the built executable (which links LibTorch, so this also shows that the
// SentencePiece module loads beside it), and its errors.
#include <doctest/doctest.h>

#include "lint/run_meshrun.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_test_support.hpp"

namespace meshrun {
namespace {

using test::run_meshrun;
using test::TempDir;

TEST_CASE("meshrun tokenize with builtin:bytes") {
  REQUIRE(test::meshrun_built());
  auto encoded = run_meshrun({"tokenize", "builtin:bytes", "--text", "Hi"});
  CHECK(encoded.exit_code == 0);
  CHECK(encoded.out == "[256,72,105]\n");
  CHECK(run_meshrun({"tokenize", "builtin:bytes", "--text", "Hi", "--no-special"}).out == "[72,105]\n");
  CHECK(run_meshrun({"tokenize", "builtin:tiny", "--text", "é", "--no-special"}).out == "[195,169]\n");

  auto decoded = run_meshrun({"tokenize", "builtin:bytes", "--decode", "[256, 72, 105]"});
  CHECK(decoded.exit_code == 0);
  CHECK(decoded.out == "<|bos|>Hi\n");
  CHECK(run_meshrun({"tokenize", "builtin:bytes", "--decode", "256,72, 105", "--no-special"}).out == "Hi\n");
}

TEST_CASE("meshrun tokenize agrees with the library on a Llama 3 style tokenizer.json") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  REQUIRE(test::run_python("make_bpe_tokenizer.py", "llama3 " + test::quoted(dir / "llama3")) == 0);
  auto tokenizer = load_tokenizer(dir / "llama3");
  const std::string text = "<|start_header_id|>user<|end_header_id|>\n\nDon't tokenize 12345 日本 🙂<|eot_id|>";
  const auto ids = tokenizer->encode(text, true);
  auto encoded = run_meshrun({"tokenize", dir / "llama3", "--text", text});
  CHECK(encoded.exit_code == 0);
  CHECK(encoded.out == nlohmann::json(ids).dump() + "\n");
  auto plain = run_meshrun({"tokenize", dir / "llama3/tokenizer.json", "--text", text, "--no-special"});
  CHECK(plain.out == nlohmann::json(tokenizer->encode(text, false)).dump() + "\n");

  auto decoded = run_meshrun({"tokenize", dir / "llama3", "--decode", nlohmann::json(ids).dump()});
  CHECK(decoded.exit_code == 0);
  CHECK(decoded.out == "<|begin_of_text|>" + text + "\n");
  auto skipped = run_meshrun({"tokenize", dir / "llama3", "--decode", nlohmann::json(ids).dump(), "--no-special"});
  CHECK(skipped.out == "user\n\nDon't tokenize 12345 日本 🙂\n");
}

TEST_CASE("meshrun tokenize with a SentencePiece model") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  test::write_text(dir / "corpus.txt", "hello world\nthe quick brown fox\nhello there world\n");
  const std::string command = "spm_train --input=" + test::quoted(dir / "corpus.txt") + " --model_prefix=" +
                              test::quoted(dir / "m") +
                              " --vocab_size=40 --model_type=bpe --hard_vocab_limit=false --minloglevel=2 "
                              ">/dev/null 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  auto tokenizer = load_tokenizer(dir / "m.model");
  auto encoded = run_meshrun({"tokenize", dir / "m.model", "--text", "hello world"});
  CHECK(encoded.exit_code == 0);
  CHECK(encoded.out == nlohmann::json(tokenizer->encode("hello world", true)).dump() + "\n");
  auto decoded = run_meshrun({"tokenize", dir / "m.model", "--decode", nlohmann::json(tokenizer->encode("hello world", false)).dump()});
  CHECK(decoded.out == "hello world\n");

  auto missing = run_meshrun({"tokenize", dir / "m.model", "--text", "x"},
                             "MESHRUN_SENTENCEPIECE_MODULE=" + test::shell_quote(dir / "nowhere.so"));
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find("SentencePiece module") != std::string::npos);
  CHECK(missing.err.find(dir / "nowhere.so") != std::string::npos);
}

TEST_CASE("meshrun tokenize errors: exit 1 naming what is wrong, usage errors exit 2") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  auto missing = run_meshrun({"tokenize", "/nonexistent/dir", "--text", "x"});
  CHECK(missing.exit_code == 1);
  CHECK(missing.err == "meshrun tokenize: tokenizer /nonexistent/dir: no such file or directory\n");
  CHECK(missing.out.empty());

  test::write_text(dir / "tokenizer.json", "{ not json");
  auto malformed = run_meshrun({"tokenize", dir.path().string(), "--text", "x"});
  CHECK(malformed.exit_code == 1);
  CHECK(malformed.err.find("tokenizer.json at " + (dir / "tokenizer.json") + ": not valid JSON") != std::string::npos);

  auto unknown_id = run_meshrun({"tokenize", "builtin:bytes", "--decode", "[72, 300]"});
  CHECK(unknown_id.exit_code == 1);
  CHECK(unknown_id.err.find("unknown token id 300") != std::string::npos);

  for (const char* bad : {"[1, \"a\"]", "1,,2", "one", "[1.5]", "{}", "99999999999"}) {
    CAPTURE(bad);
    auto result = run_meshrun({"tokenize", "builtin:bytes", "--decode", bad});
    CHECK(result.exit_code == 1);
    CHECK(result.err.find("is not a JSON array or a comma-separated list of integer ids") != std::string::npos);
  }

  CHECK(run_meshrun({"tokenize", "builtin:bytes"}).exit_code == 2);
  CHECK(run_meshrun({"tokenize", "builtin:bytes", "--text", "a", "--decode", "1"}).exit_code == 2);
  CHECK(run_meshrun({"tokenize", "--text", "a"}).exit_code == 2);
}

}  // namespace
}  // namespace meshrun
