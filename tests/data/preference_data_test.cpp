// Tests of src/data/preference_data.cpp: the forms of a preference line,
// every bad line reported by line and key, truncation, and micro-batches of
// whole pairs (chosen rows, then rejected rows).
#include <doctest/doctest.h>

#include "data_test_support.hpp"
#include "meshrun/data/preference.hpp"

namespace meshrun {
namespace {

using data_test::bytes_of;
using data_test::concat;
using data_test::data_config;
using data_test::FakeTokenizer;
using data_test::ScratchFolder;

DataConfig pair_config(const std::string& path, int max_len = 2048) {
  DataConfig config = data_config(path, max_len);
  config.input_key = "prompt";
  return config;
}

std::vector<std::string> problems_of(const DataConfig& config) {
  try {
    read_preference_records(config);
  } catch (const DataError& error) {
    std::vector<std::string> texts;
    for (const DataProblem& problem : error.problems()) texts.push_back(problem.str());
    return texts;
  }
  FAIL("expected DataError");
  return {};
}

TEST_CASE("preference lines: string pairs, chat prompts with string or message replies") {
  ScratchFolder folder;
  const std::string path = folder.write("p.jsonl", R"({"prompt": "2+2=", "chosen": "4", "rejected": "5"}
{"prompt": [{"role": "user", "content": "hi"}], "chosen": "hello", "rejected": "go away"}
{"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "assistant", "content": "hey"}], "rejected": [{"role": "assistant", "content": "no"}]}
)");
  const auto records = read_preference_records(pair_config(path));
  REQUIRE(records.size() == 3);
  CHECK_FALSE(records[0].chosen.is_chat);
  CHECK(records[0].chosen.input == "2+2=");
  CHECK(records[0].chosen.output == "4");
  CHECK(records[0].rejected.output == "5");
  CHECK(records[1].chosen.is_chat);
  REQUIRE(records[1].rejected.messages.size() == 2);
  CHECK(records[1].rejected.messages[1].role == "assistant");
  CHECK(records[1].rejected.messages[1].content == "go away");
  CHECK(records[2].line == 3);
  REQUIRE(records[2].chosen.messages.size() == 2);
  CHECK(records[2].chosen.messages[1].content == "hey");

  // Tokenised like SFT samples: the loss mask covers each reply (and eos).
  FakeTokenizer tokenizer;
  const PreferenceDataset dataset = load_preference_dataset(pair_config(path), tokenizer);
  REQUIRE(dataset.pairs.size() == 3);
  const PreferencePair& pair = dataset.pairs[0];
  CHECK(pair.chosen.input_ids == concat(concat({256}, bytes_of("2+2=4")), {257}));
  CHECK(pair.rejected.input_ids == concat(concat({256}, bytes_of("2+2=5")), {257}));
  CHECK(pair.chosen.loss_tokens() == 2);
  CHECK(pair.chosen.prompt_len == 5);
}

TEST_CASE("bad preference lines are reported together, by line and key") {
  ScratchFolder folder;
  const std::string path = folder.write("bad.jsonl", R"({"prompt": "a", "chosen": "x"}
{"prompt": "a", "chosen": "x", "rejected": "x"}
{"prompt": "a", "chosen": "x", "rejected": [{"role": "assistant", "content": "y"}]}
{"prompt": "a", "chosen": [{"role": "assistant", "content": "x"}], "rejected": [{"role": "assistant", "content": "y"}]}
{"prompt": 7, "chosen": "x", "rejected": "y"}
{"prompt": [{"role": "user", "content": "a"}], "chosen": [{"role": "user", "content": "x"}], "rejected": [{"role": "assistant", "content": "y"}]}
{"prompt": "fine", "chosen": "x", "rejected": "y"}
)");
  const auto problems = problems_of(pair_config(path));
  REQUIRE(problems.size() == 6);
  CHECK(problems[0].find(":1: key \"rejected\": missing") != std::string::npos);
  CHECK(problems[1].find(":2: key \"rejected\": is the same as \"chosen\"") != std::string::npos);
  CHECK(problems[2].find(":3: key \"rejected\": must be a string like \"chosen\"") != std::string::npos);
  CHECK(problems[3].find(":4: key \"prompt\": is a string, but the responses are lists of messages") !=
        std::string::npos);
  CHECK(problems[4].find(":5: key \"prompt\": must be a string or a list") != std::string::npos);
  CHECK(problems[5].find(":6: key \"chosen[0].role\": the last message must be the assistant's") !=
        std::string::npos);
}

TEST_CASE("keys come from the config; chosen_key and rejected_key rename the replies") {
  ScratchFolder folder;
  const std::string path = folder.write("k.jsonl", R"({"q": "a", "good": "b", "bad": "c"}
)");
  DataConfig config = data_config(path);
  config.input_key = "q";
  config.chosen_key = "good";
  config.rejected_key = "bad";
  const auto records = read_preference_records(config);
  REQUIRE(records.size() == 1);
  CHECK(records[0].chosen.output == "b");
  CHECK(records[0].rejected.output == "c");
}

TEST_CASE("dotted keys reach nested replies; equal nested replies are refused like equal flat ones") {
  ScratchFolder folder;
  const std::string path = folder.write("n.jsonl", R"({"q": "a", "pair": {"chosen": "b", "rejected": "c"}}
{"q": "a", "pair": {"chosen": "same", "rejected": "same"}}
)");
  DataConfig config = data_config(path);
  config.input_key = "q";
  config.chosen_key = "pair.chosen";
  config.rejected_key = "pair.rejected";
  CHECK_THROWS_WITH_AS(read_preference_records(config),
                       doctest::Contains((path + ":2: key \"pair.rejected\": is the same as \"pair.chosen\"").c_str()), DataError);
  folder.write("n.jsonl", R"({"q": "a", "pair": {"chosen": "b", "rejected": "c"}})");
  const auto records = read_preference_records(config);
  REQUIRE(records.size() == 1);
  CHECK(records[0].chosen.output == "b");
  CHECK(records[0].rejected.output == "c");
}

TEST_CASE("truncation: a pair loses both replies' ends, or is dropped when one keeps no token") {
  ScratchFolder folder;
  const std::string path = folder.write("t.jsonl", R"({"prompt": "abcd", "chosen": "efgh", "rejected": "ij"}
{"prompt": "abcdefgh", "chosen": "x", "rejected": "y"}
{"prompt": "ab", "chosen": "c", "rejected": "d"}
)");
  FakeTokenizer tokenizer;
  const PreferenceDataset dataset = load_preference_dataset(pair_config(path, 7), tokenizer);
  REQUIRE(dataset.pairs.size() == 2);
  CHECK(dataset.lines == 3);
  CHECK(dataset.truncated == 1);
  CHECK(dataset.dropped == 1);
  CHECK(dataset.pairs[0].chosen.size() == 7);
  CHECK(dataset.pairs[0].rejected.size() == 7);  // bos abcd ij (eos cut)
  CHECK(dataset.summary() == "2 pairs from 3 lines, 1 truncated to max_len, 1 dropped (a response left without "
                             "tokens by max_len)");
}

TEST_CASE("a pair whose replies max_len cuts to the same tokens is dropped and counted, not trained on") {
  ScratchFolder folder;
  const std::string path = folder.write("same.jsonl", R"({"prompt": "abcd", "chosen": "efgh", "rejected": "efgX"}
{"prompt": "ab", "chosen": "c", "rejected": "d"}
)");
  FakeTokenizer tokenizer;
  const PreferenceDataset dataset = load_preference_dataset(pair_config(path, 7), tokenizer);
  REQUIRE(dataset.pairs.size() == 1);
  CHECK(dataset.identical == 1);
  CHECK(dataset.truncated == 0);
  CHECK(dataset.summary() == "1 pairs from 2 lines, 1 dropped (chosen and rejected the same within max_len)");
  // Cut where they still differ, a pair is kept.
  const PreferenceDataset longer = load_preference_dataset(pair_config(path, 9), tokenizer);  // bos abcd efg + h or X
  CHECK(longer.pairs.size() == 2);
  CHECK(longer.identical == 0);
}

TEST_CASE("micro-batches hold whole pairs: the chosen rows, then the rejected rows in the same order") {
  ScratchFolder folder;
  std::string lines;
  for (int i = 0; i < 8; ++i)
    lines += "{\"prompt\": \"p" + std::to_string(i) + "\", \"chosen\": \"c" + std::to_string(i) +
             "\", \"rejected\": \"rr" + std::to_string(i) + "\"}\n";
  const DataConfig data_config = pair_config(folder.write("m.jsonl", lines));
  Batching batching;
  batching.global_batch = 4;
  batching.micro_batch = 2;
  batching.seed = 5;
  batching.items = BatchItems::pairs;
  FakeTokenizer tokenizer;
  SftDataOptions options;
  options.dp_size = 2;
  options.dp_rank = 1;
  PreferenceData data(data_config, batching, tokenizer, options);
  CHECK(data.total_steps() == 2);
  CHECK(data.grad_accum() == 1);
  const auto step = data.next();
  REQUIRE(step);
  REQUIRE(step->micro_batches.size() == 1);
  const MicroBatch& batch = step->micro_batches.front();
  REQUIRE(batch.rows == 4);
  const auto row_text = [&](int row) {
    std::string text;
    for (int column = 0; column < batch.length; ++column)
      if (batch.attention_mask[batch.at(row, column)] && batch.input_ids[batch.at(row, column)] < 256)
        text += static_cast<char>(batch.input_ids[batch.at(row, column)]);
    return text;
  };
  for (int pair = 0; pair < 2; ++pair) {
    const std::string chosen = row_text(pair), rejected = row_text(pair + 2);
    REQUIRE(chosen.size() == 4);  // "pNcN"
    CHECK(chosen[0] == 'p');
    CHECK(chosen.substr(2, 1) == "c");
    CHECK(rejected == chosen.substr(0, 2) + "rr" + chosen.substr(1, 1));  // the same prompt
  }
}

}  // namespace
}  // namespace meshrun
