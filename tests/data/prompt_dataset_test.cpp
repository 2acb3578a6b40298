// Tests of src/data/prompt_dataset.cpp: plain and chat prompts, left
// truncation, and the located errors of a bad file.
#include <doctest/doctest.h>

#include "data_test_support.hpp"
#include "meshrun/data/prompts.hpp"

namespace meshrun {
namespace {

using data_test::data_config;
using data_test::FakeTokenizer;
using data_test::ScratchFolder;

TEST_CASE("plain and chat prompts tokenise as generation will see them") {
  ScratchFolder folder;
  const std::string path = folder.write("p.jsonl", R"({"input": "ab"}

{"messages": [{"role": "user", "content": "u"}]}
)");
  FakeTokenizer tokenizer;
  const PromptDataset dataset = load_prompt_dataset(data_config(path), tokenizer, 64);
  REQUIRE(dataset.prompts.size() == 2);
  CHECK(dataset.prompts[0].line == 1);
  CHECK(dataset.prompts[0].ids == std::vector<int32_t>{256, 'a', 'b'});
  CHECK(dataset.prompts[1].line == 3);
  const std::string rendered = tokenizer.apply_chat_template({{"user", "u"}}, true);
  CHECK(dataset.prompts[1].ids == tokenizer.encode(rendered, false));
  CHECK(dataset.truncated == 0);
}

TEST_CASE("veRL's rows: the chat under \"prompt\", the label at a dotted path; a literal dotted key wins") {
  ScratchFolder folder;
  // examples/data_preprocess/gsm8k.py's columns, as JSON Lines (or one JSON array).
  const std::string row = R"({"data_source": "openai/gsm8k", "prompt": [{"role": "user", "content": "1+1?"}],
      "ability": "math", "reward_model": {"style": "rule", "ground_truth": "2"}, "extra_info": {"index": 0}})";
  std::string one_line = row;
  std::erase(one_line, '\n');
  for (const std::string& text : {one_line + "\n", "[\n" + row + "\n]\n"}) {
    CAPTURE(text);
    const std::string path = folder.write("verl.json", text);
    DataConfig config = data_config(path);
    config.messages_key = "prompt";
    config.label_key = "reward_model.ground_truth";
    const std::vector<PromptRecord> records = read_prompt_records(config);
    REQUIRE(records.size() == 1);
    CHECK(records[0].is_chat);
    CHECK(records[0].messages[0].content == "1+1?");
    REQUIRE(records[0].label.has_value());
    CHECK(*records[0].label == "2");
  }
  // A member whose name has the dots is that key; a path that leaves the objects is missing.
  const std::string path = folder.write("dots.jsonl", R"({"input": "q", "a.b": 1, "a": {"b": 2}}
{"input": "q", "a": 5}
)");
  DataConfig config = data_config(path);
  config.label_key = "a.b";
  try {
    read_prompt_records(config);
    FAIL("expected DataError");
  } catch (const DataError& error) {
    REQUIRE(error.problems().size() == 1);
    CHECK(error.problems()[0].str() == path + ":2: key \"a.b\": missing (data.label_key names the label every prompt carries)");
  }
  folder.write("dots.jsonl", R"({"input": "q", "a.b": 1, "a": {"b": 2}})");
  CHECK(*read_prompt_records(config)[0].label == 1);
}

TEST_CASE("a prompt longer than max_prompt_len keeps its last tokens") {
  ScratchFolder folder;
  const std::string path = folder.write("p.jsonl", "{\"input\": \"abcdef\"}\n{\"input\": \"xy\"}\n");
  FakeTokenizer tokenizer;
  const PromptDataset dataset = load_prompt_dataset(data_config(path), tokenizer, 3);
  CHECK(dataset.prompts[0].ids == std::vector<int32_t>{'d', 'e', 'f'});
  CHECK(dataset.prompts[1].ids == std::vector<int32_t>{256, 'x', 'y'});
  CHECK(dataset.truncated == 1);
  CHECK(encode_prompt("abcdef", tokenizer, 2) == std::vector<int32_t>{'e', 'f'});
}

TEST_CASE("every bad line is reported with its line and key") {
  ScratchFolder folder;
  const std::string path = folder.write("p.jsonl", R"({"input": 3}
{"other": "x"}
{"messages": [{"role": "user"}]}
not json
)");
  FakeTokenizer tokenizer;
  try {
    load_prompt_dataset(data_config(path), tokenizer, 8);
    FAIL("no error");
  } catch (const DataError& error) {
    const std::string message = error.what();
    CHECK(error.total() == 4);
    CHECK(message.find(":1: key \"input\": must be a string, got number") != std::string::npos);
    CHECK(message.find(":2: key \"input\": missing") != std::string::npos);
    CHECK(message.find(":3: key \"messages[0]\"") != std::string::npos);
    CHECK(message.find(":4:") != std::string::npos);
  }
  const std::string empty = folder.write("e.jsonl", "\n");
  CHECK_THROWS_WITH_AS(load_prompt_dataset(data_config(empty), tokenizer, 8), doctest::Contains("holds no prompt"),
                       DataError);
}

}  // namespace
}  // namespace meshrun
