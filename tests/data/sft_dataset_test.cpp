// Tests of src/data/sft_dataset.cpp: loading a file end to end, counting
// truncated and dropped samples, and the whole-file errors.
#include <doctest/doctest.h>

#include "data_test_support.hpp"
#include "meshrun/data/dataset.hpp"

namespace meshrun {
namespace {

using data_test::data_config;
using data_test::FakeTokenizer;
using data_test::ScratchFolder;

TEST_CASE("a mixed file loads into samples in file order with their lines") {
  ScratchFolder folder;
  const std::string path = folder.write("d.jsonl", R"({"input": "a", "output": "b"}

{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "v"}]}
)");
  FakeTokenizer tokenizer;
  const SftDataset dataset = load_sft_dataset(data_config(path), tokenizer);
  CHECK(dataset.path == path);
  REQUIRE(dataset.samples.size() == 2);
  CHECK(dataset.samples[0].line == 1);
  CHECK(dataset.samples[1].line == 3);
  CHECK(dataset.samples[0].size() == 4);  // bos a b eos
  CHECK(dataset.stats.lines == 2);
  CHECK(dataset.stats.samples == 2);
  CHECK(dataset.stats.tokens == dataset.samples[0].size() + dataset.samples[1].size());
  CHECK(dataset.stats.loss_tokens == 2 + 3);  // "b" eos; "v\n" eos
  CHECK(dataset.stats.dropped() == 0);
  CHECK(dataset.stats.summary() == "2 samples (" + std::to_string(dataset.stats.tokens) +
                                       " tokens, 5 loss tokens) from 2 lines");
}

TEST_CASE("long samples are cut to max_len; prompts that fill it are dropped and counted") {
  ScratchFolder folder;
  const std::string path = folder.write("d.jsonl", R"({"input": "ab", "output": "cd"}
{"input": "abcdef", "output": "g"}
{"input": "a", "output": "bcdefgh"}
{"input": "abcde", "output": "x"}
)");
  FakeTokenizer tokenizer;
  const SftDataset dataset = load_sft_dataset(data_config(path, 6), tokenizer);
  // Line 2: bos + 6 prompt tokens > 6. Line 4: bos + 5 = 6, the prompt fills max_len.
  REQUIRE(dataset.samples.size() == 2);
  CHECK(dataset.samples[0].line == 1);
  CHECK(dataset.samples[1].line == 3);
  CHECK(dataset.samples[1].size() == 6);
  CHECK(dataset.samples[1].loss_tokens() == 4);
  CHECK(dataset.stats.lines == 4);
  CHECK(dataset.stats.truncated == 1);
  CHECK(dataset.stats.dropped_prompt_fills_max_len == 2);
  CHECK(dataset.stats.dropped_no_response_token == 0);
  CHECK(dataset.stats.summary().find("1 truncated to max_len, 2 dropped (2 prompt fills max_len, 0 no response token)") !=
        std::string::npos);
}

TEST_CASE("an empty response without eos has nothing to learn and is dropped") {
  ScratchFolder folder;
  const std::string path = folder.write("d.jsonl", "{\"input\": \"a\", \"output\": \"\"}\n{\"input\": \"a\", \"output\": \"b\"}\n");
  FakeTokenizer tokenizer;
  tokenizer.has_eos = false;
  const SftDataset dataset = load_sft_dataset(data_config(path), tokenizer);
  CHECK(dataset.samples.size() == 1);
  CHECK(dataset.stats.dropped_no_response_token == 1);
}

TEST_CASE("a file whose every sample is dropped is an error") {
  ScratchFolder folder;
  const std::string path = folder.write("d.jsonl", "{\"input\": \"abcdef\", \"output\": \"g\"}\n");
  FakeTokenizer tokenizer;
  CHECK_THROWS_WITH_AS(load_sft_dataset(data_config(path, 4), tokenizer),
                       doctest::Contains("every sample was dropped"), DataError);
  CHECK_THROWS_WITH_AS(load_sft_dataset(data_config(path, 1), tokenizer),
                       doctest::Contains("data.max_len must be at least 2"), DataError);
}

TEST_CASE("template and tokenizer problems of several lines are reported together") {
  ScratchFolder folder;
  const std::string path = folder.write("d.jsonl", R"({"input": "BOOM", "output": "b"}
{"input": "fine", "output": "b"}
{"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": "v"}]}
{"input": "x", "output": "BOOM"}
)");
  FakeTokenizer tokenizer;
  tokenizer.fail_on = "BOOM";
  tokenizer.generation_prompt = "<|bot|>\n";
  try {
    load_sft_dataset(data_config(path), tokenizer);
    FAIL("expected DataError");
  } catch (const DataError& error) {
    REQUIRE(error.total() == 3);
    CHECK(error.problems()[0].line == 1);
    CHECK(error.problems()[1].line == 3);
    CHECK(error.problems()[1].message.find("not a prefix") != std::string::npos);
    CHECK(error.problems()[2].line == 4);
  }
}

}  // namespace
}  // namespace meshrun
