// Tests of src/data/sft_records.cpp: the two record forms, configurable
// keys, and every problem of a file reported at once by line and key.
#include <doctest/doctest.h>

#include "data_test_support.hpp"
#include "meshrun/data/dataset.hpp"

namespace meshrun {
namespace {

using data_test::data_config;
using data_test::ScratchFolder;

DataError read_error(const DataConfig& config, int max_errors = kDefaultMaxDataErrors) {
  try {
    read_sft_records(config, max_errors);
  } catch (const DataError& error) {
    return error;
  }
  FAIL("expected DataError");
  return DataError({}, 0);
}

std::vector<std::string> problem_texts(const DataError& error) {
  std::vector<std::string> texts;
  for (const DataProblem& problem : error.problems()) texts.push_back(problem.str());
  return texts;
}

TEST_CASE("prompt/response and chat lines, keys from the config") {
  ScratchFolder folder;
  const std::string path = folder.write("d.jsonl", R"({"q": "2+2?", "a": "4", "extra": 1}
{"conv": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
)");
  DataConfig config = data_config(path);
  config.input_key = "q";
  config.output_key = "a";
  config.messages_key = "conv";
  const auto records = read_sft_records(config);
  REQUIRE(records.size() == 2);
  CHECK_FALSE(records[0].is_chat);
  CHECK(records[0].line == 1);
  CHECK(records[0].input == "2+2?");
  CHECK(records[0].output == "4");
  CHECK(records[1].is_chat);
  CHECK(records[1].line == 2);
  REQUIRE(records[1].messages.size() == 3);
  CHECK(records[1].messages[0].role == "system");
  CHECK(records[1].messages[2].content == "hello");
}

TEST_CASE("dotted keys reach nested prompt and response fields") {
  ScratchFolder folder;
  const std::string path = folder.write("n.jsonl", R"({"turn": {"q": "2+2?", "a": "4"}}
{"turn": {"q": "3+3?"}}
)");
  DataConfig config = data_config(path);
  config.input_key = "turn.q";
  config.output_key = "turn.a";
  CHECK_THROWS_WITH_AS(read_sft_records(config), doctest::Contains((path + ":2: key \"turn.a\": missing").c_str()), DataError);
  folder.write("n.jsonl", R"({"turn": {"q": "2+2?", "a": "4"}})");
  const auto records = read_sft_records(config);
  REQUIRE(records.size() == 1);
  CHECK(records[0].input == "2+2?");
  CHECK(records[0].output == "4");
}

TEST_CASE("every bad line is reported at once with its line and key") {
  ScratchFolder folder;
  const std::string path = folder.write("bad.jsonl", R"({"input": "ok", "output": "fine"}
not json
{"input": "no output"}
{"input": 3, "output": "x"}
{"messages": "hello"}
{"messages": [{"role": "user"}, 5, {"role": "assistant", "content": "x"}]}
{"messages": [{"role": "user", "content": "hi"}]}
{"prompt": "p", "completion": "c"}
{"messages": []}
{"input": "a", "output": null}
)");
  const DataError error = read_error(data_config(path));
  CHECK(error.total() == 10);
  const std::vector<std::string> expected = {
      path + ":3: key \"output\": missing",
      path + ":4: key \"input\": must be a string, got number",
      path + ":5: key \"messages\": must be a list of {\"role\", \"content\"} objects, got string",
      path + ":6: key \"messages[0].content\": missing",
      path + ":6: key \"messages[1]\": must be an object with \"role\" and \"content\", got number",
      path + ":7: key \"messages[0].role\": the last message must be the assistant's (the response trained on), "
             "got \"user\"",
      path + ":8: neither \"input\" and \"output\" nor \"messages\" (set data.input_key / data.output_key / "
             "data.messages_key to this file's keys)",
      path + ":9: key \"messages\": is empty; the last message must be the assistant's",
      path + ":10: key \"output\": must be a string, got null",
  };
  const auto texts = problem_texts(error);
  REQUIRE(texts.size() == 10);
  CHECK(texts[0].starts_with(path + ":2: not JSON: "));
  CHECK(std::vector<std::string>(texts.begin() + 1, texts.end()) == expected);
}

TEST_CASE("problems beyond the limit are counted, not listed") {
  ScratchFolder folder;
  std::string text;
  for (int i = 0; i < 30; ++i) text += "{\"input\": \"x\"}\n";
  const DataError error = read_error(data_config(folder.write("many.jsonl", text)), 4);
  CHECK(error.total() == 30);
  CHECK(error.problems().size() == 4);
  CHECK(error.problems()[3].line == 4);
  CHECK(std::string(error.what()).find("... and 26 more") != std::string::npos);
}

TEST_CASE("an empty dataset, or a missing file, is a clear error") {
  ScratchFolder folder;
  const std::string empty = folder.write("empty.jsonl", "\n  \n");
  CHECK_THROWS_WITH_AS(read_sft_records(data_config(empty)),
                       doctest::Contains("the dataset is empty: no non-blank line"), DataError);
  CHECK_THROWS_WITH_AS(read_sft_records(data_config(folder.write("zero.jsonl", ""))),
                       doctest::Contains("empty"), DataError);
  CHECK_THROWS_WITH_AS(read_sft_records(data_config((folder.root() / "missing.jsonl").string())),
                       doctest::Contains("missing.jsonl: data file does not exist"), DataError);
}

}  // namespace
}  // namespace meshrun
