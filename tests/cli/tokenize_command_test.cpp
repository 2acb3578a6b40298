// `meshrun tokenize`: encoding and decoding from the command line, through
// the built executable (which links LibTorch, so this also shows that the
// SentencePiece module loads beside it), and its errors.
#include <doctest/doctest.h>

#include <filesystem>

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

// --chat: a Qwen3 model directory (its template with tools and thinking);
// the text must equal Python's jinja2 configured as transformers does, and
// the ids the tokenizer's encoding of that text without added specials.
TEST_CASE("meshrun tokenize --chat renders a conversation like jinja2") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  REQUIRE(test::run_python("make_bpe_tokenizer.py", "qwen2 " + test::quoted(dir / "qwen3")) == 0);
  const std::string qwen3_template = test::read_text(test::tokenizer_test_dir() + "/templates/qwen3.jinja");
  nlohmann::ordered_json config = test::read_json(dir / "qwen3/tokenizer_config.json");
  config["chat_template"] = qwen3_template;
  test::write_text(dir / "qwen3/tokenizer_config.json", config.dump());
  test::write_text(dir / "qwen3.jinja", qwen3_template);

  const auto conversation = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris? Café 🙂"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "sunny"},
      {"role": "assistant", "reasoning_content": "It said sunny.", "content": "Sunny."},
      {"role": "user", "content": "Thanks"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
      "properties": {"city": {"type": "string"}}}}}],
    "enable_thinking": false})");
  test::write_text(dir / "object.json", conversation.dump(2));
  test::write_text(dir / "list.json", conversation["messages"].dump());

  // The reference: the conversation's variables with the tokenizer's eos
  // (Qwen has no bos token, so bos_token stays undefined, as in transformers).
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const bool generation_prompt : {true, false}) {
    for (const bool with_tools : {true, false}) {
      nlohmann::ordered_json variables = with_tools ? conversation
                                                    : nlohmann::ordered_json{{"messages", conversation["messages"]}};
      variables["eos_token"] = "<|im_end|>";
      variables["add_generation_prompt"] = generation_prompt;
      cases.push_back({{"template", dir / "qwen3.jinja"}, {"variables", variables}});
    }
  }
  test::write_text(dir / "cases.json", cases.dump());
  REQUIRE(test::run_python("render_templates.py", test::quoted(dir / "cases.json") + " " +
                                                      test::quoted(dir / "expected.json")) == 0);
  const auto expected = test::read_json(dir / "expected.json");
  auto tokenizer = load_tokenizer(dir / "qwen3");
  size_t index = 0;
  for (const bool generation_prompt : {true, false}) {
    for (const char* file : {"object.json", "list.json"}) {
      CAPTURE(generation_prompt);
      CAPTURE(file);
      const std::string text = expected[index++]["text"].get<std::string>();
      std::vector<std::string> args = {"tokenize", dir / "qwen3", "--chat", dir / file, "--render"};
      if (generation_prompt) args.push_back("--generation-prompt");
      auto rendered = run_meshrun(args);
      CHECK(rendered.exit_code == 0);
      CHECK(rendered.err.empty());
      CHECK(rendered.out == text + "\n");
      args.erase(args.begin() + 4);
      auto ids = run_meshrun(args);
      CHECK(ids.exit_code == 0);
      CHECK(ids.out == nlohmann::json(tokenizer->encode(text, false)).dump() + "\n");
    }
  }
  // The thinking switch reached the template; the tools block only the object.
  CHECK(expected[0]["text"].get<std::string>().find("<think>\n\n</think>") != std::string::npos);
  CHECK(expected[0]["text"].get<std::string>().find("# Tools") != std::string::npos);
  CHECK(expected[1]["text"].get<std::string>().find("# Tools") == std::string::npos);

  // Without a template of its own, a tokenizer uses the built-in format.
  auto builtin = run_meshrun({"tokenize", "builtin:bytes", "--chat", dir / "list.json", "--render"});
  CHECK(builtin.exit_code == 1);  // a message without string content
  CHECK(builtin.err.find(dir / "list.json") != std::string::npos);
  CHECK(builtin.err.find("message 3") != std::string::npos);
  test::write_text(dir / "plain.json", R"([{"role": "user", "content": "Hi"}])");
  auto plain = run_meshrun({"tokenize", "builtin:bytes", "--chat", dir / "plain.json", "--render", "--generation-prompt"});
  CHECK(plain.out == "<|user|>\nHi\n<|assistant|>\n\n");
}

TEST_CASE("meshrun tokenize --chat errors name the file, the line or the template") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  REQUIRE(test::run_python("make_bpe_tokenizer.py", "qwen2 " + test::quoted(dir / "model")) == 0);
  nlohmann::ordered_json config = test::read_json(dir / "model/tokenizer_config.json");
  config["chat_template"] =
      "{% for m in messages %}{% if m.role == 'robot' %}{{ raise_exception('no robots here') }}{% endif %}"
      "{{ m.content }}{% endfor %}";
  test::write_text(dir / "model/tokenizer_config.json", config.dump());

  const auto fails = [&](const std::string& file, const std::string& text, const std::string& message) {
    CAPTURE(text);
    if (!text.empty()) test::write_text(dir / file, text);
    auto result = run_meshrun({"tokenize", dir / "model", "--chat", dir / file, "--render"});
    CHECK(result.exit_code == 1);
    CHECK(result.out.empty());
    CHECK(result.err.find(message) != std::string::npos);
    CHECK(result.err.find(dir / file) != std::string::npos);
  };
  fails("robot.json", R"([{"role": "robot", "content": "beep"}])", "line 1: raise_exception: no robots here");
  fails("syntax.json", "[\n  {\"role\": \"user\",\n   \"content\": oops}\n]", "syntax.json:3:");
  fails("scalar.json", "42", "a JSON list of messages or an object");
  fails("nomessages.json", R"({"msgs": []})", "no \"messages\" list");
  fails("norole.json", R"([{"content": "x"}])", "message 1 is not an object with a string \"role\"");
  fails("tools.json", R"({"messages": [], "tools": "all"})", "\"tools\" must be a list");
  fails("absent.json", "", "no such file");
  std::filesystem::create_directory(dir / "folder.json");
  fails("folder.json", "", "not a regular file");

  // The flags that only make sense with --chat are usage errors without it.
  CHECK(run_meshrun({"tokenize", "builtin:bytes", "--text", "a", "--render"}).exit_code == 2);
  CHECK(run_meshrun({"tokenize", "builtin:bytes", "--text", "a", "--generation-prompt"}).exit_code == 2);
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
