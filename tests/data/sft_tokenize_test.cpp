// Tests of src/data/sft_tokenize.cpp: which tokens a record becomes, where
// the loss mask lies, and truncation.
#include <doctest/doctest.h>

#include "data_test_support.hpp"
#include "meshrun/data/dataset.hpp"

namespace meshrun {
namespace {

using data_test::bytes_of;
using data_test::concat;
using data_test::FakeTokenizer;

constexpr int32_t kBos = 256;
constexpr int32_t kEos = 257;

SftRecord prompt_response(std::string input, std::string output) {
  SftRecord record;
  record.line = 7;
  record.input = std::move(input);
  record.output = std::move(output);
  return record;
}

SftRecord chat(std::vector<ChatMessage> messages) {
  SftRecord record;
  record.line = 9;
  record.is_chat = true;
  record.messages = std::move(messages);
  return record;
}

std::vector<uint8_t> mask(std::size_t zeros, std::size_t ones) {
  std::vector<uint8_t> out(zeros, 0);
  out.insert(out.end(), ones, 1);
  return out;
}

TEST_CASE("prompt/response: bos + input, then output + eos with the loss on the response") {
  FakeTokenizer tokenizer;
  const SftSample sample = tokenize_sft_record(prompt_response("Q:", "A!"), tokenizer, "f.jsonl");
  CHECK(sample.line == 7);
  CHECK(sample.input_ids == concat(concat({kBos}, bytes_of("Q:")), concat(bytes_of("A!"), {kEos})));
  CHECK(sample.prompt_len == 3);
  CHECK(sample.loss_mask == mask(3, 3));
  CHECK(sample.loss_tokens() == 3);
}

TEST_CASE("prompt/response without bos or eos follows the tokenizer") {
  FakeTokenizer tokenizer;
  tokenizer.add_bos = false;
  tokenizer.has_eos = false;
  const SftSample sample = tokenize_sft_record(prompt_response("ab", "cd"), tokenizer, "f.jsonl");
  CHECK(sample.input_ids == bytes_of("abcd"));
  CHECK(sample.loss_mask == mask(2, 2));
}

TEST_CASE("an empty prompt never makes the first token a target") {
  FakeTokenizer tokenizer;
  tokenizer.add_bos = false;
  const SftSample sample = tokenize_sft_record(prompt_response("", "xy"), tokenizer, "f.jsonl");
  CHECK(sample.input_ids == concat(bytes_of("xy"), {kEos}));
  CHECK(sample.prompt_len == 0);
  CHECK(sample.loss_mask == std::vector<uint8_t>{0, 1, 1});
}

TEST_CASE("a merge across the prompt/response boundary keeps the boundary") {
  FakeTokenizer tokenizer;
  tokenizer.merge = "ab";  // "a" + "b" jointly would be one token, 259
  const SftSample sample = tokenize_sft_record(prompt_response("xa", "by"), tokenizer, "f.jsonl");
  CHECK(sample.input_ids == concat(concat({kBos}, bytes_of("xa")), concat(bytes_of("by"), {kEos})));
  CHECK(sample.loss_mask == mask(3, 3));
  // Away from the boundary the joint encoding is kept.
  const SftSample inside = tokenize_sft_record(prompt_response("x", "aby"), tokenizer, "f.jsonl");
  CHECK(inside.input_ids == std::vector<int32_t>{kBos, 'x', 259, 'y', kEos});
  CHECK(inside.loss_mask == mask(2, 3));
}

TEST_CASE("chat: the full conversation, the loss on the last assistant message only") {
  FakeTokenizer tokenizer;
  const SftRecord record = chat({{"system", "S"}, {"user", "hi"}, {"assistant", "yo"}});
  const SftSample sample = tokenize_sft_record(record, tokenizer, "f.jsonl");
  const std::string prompt_text = "<|system|>\nS\n<|user|>\nhi\n<|assistant|>\n";
  // The template writes no eos, so one is appended; no bos (add_special = false).
  CHECK(sample.input_ids == concat(bytes_of(prompt_text + "yo\n"), {kEos}));
  CHECK(sample.prompt_len == static_cast<int>(prompt_text.size()));
  CHECK(sample.loss_mask == mask(prompt_text.size(), 4));
}

TEST_CASE("chat: a template that ends the turn with eos gets no second one") {
  FakeTokenizer tokenizer;
  tokenizer.template_writes_eos = true;
  const SftSample sample = tokenize_sft_record(chat({{"user", "u"}, {"assistant", "a"}}), tokenizer, "f.jsonl");
  const std::string prompt_text = "<|user|>\nu\n<|assistant|>\n";
  CHECK(sample.input_ids == concat(concat(bytes_of(prompt_text + "a"), {kEos}), bytes_of("\n")));
  CHECK(sample.loss_mask == mask(prompt_text.size(), 3));
}

TEST_CASE("chat: earlier assistant turns are prompt, not trained on") {
  FakeTokenizer tokenizer;
  const SftSample sample = tokenize_sft_record(
      chat({{"user", "1"}, {"assistant", "one"}, {"user", "2"}, {"assistant", "two"}}), tokenizer, "f.jsonl");
  const std::string prompt_text = "<|user|>\n1\n<|assistant|>\none\n<|user|>\n2\n<|assistant|>\n";
  CHECK(sample.prompt_len == static_cast<int>(prompt_text.size()));
  CHECK(sample.loss_tokens() == 5);  // "two\n" + eos
}

TEST_CASE("chat: a prompt that is not a prefix of the conversation is an error naming the line") {
  FakeTokenizer tokenizer;
  tokenizer.generation_prompt = "<|assistant|> ";  // the full text has "<|assistant|>\n"
  try {
    tokenize_sft_record(chat({{"user", "u"}, {"assistant", "a"}}), tokenizer, "f.jsonl");
    FAIL("expected DataError");
  } catch (const DataError& error) {
    REQUIRE(error.problems().size() == 1);
    CHECK(error.problems()[0].line == 9);
    CHECK(error.problems()[0].str().starts_with("f.jsonl:9: the chat template's prompt"));
    CHECK(error.problems()[0].message.find("differ at token 24") != std::string::npos);
    CHECK(error.problems()[0].message.find("fake byte tokenizer") != std::string::npos);
  }
}

TEST_CASE("a tokenizer error becomes a DataError naming the line") {
  FakeTokenizer tokenizer;
  tokenizer.fail_on = "BOOM";
  CHECK_THROWS_WITH_AS(tokenize_sft_record(prompt_response("x", "BOOM"), tokenizer, "f.jsonl"),
                       doctest::Contains("f.jsonl:7: tokenizer: fake tokenizer refuses \"BOOM\""), DataError);
}

TEST_CASE("truncation keeps the start and drops samples without a loss token") {
  FakeTokenizer tokenizer;
  SftSample sample = tokenize_sft_record(prompt_response("abc", "defg"), tokenizer, "f.jsonl");  // 4 + 5 tokens
  SftSample cut = sample;
  CHECK(truncate_sample(cut, 6));
  CHECK(cut.input_ids == std::vector<int32_t>(sample.input_ids.begin(), sample.input_ids.begin() + 6));
  CHECK(cut.loss_mask == mask(4, 2));
  CHECK(cut.prompt_len == 4);

  SftSample fits = sample;
  CHECK(truncate_sample(fits, 9));
  CHECK(fits.input_ids == sample.input_ids);

  SftSample prompt_only = sample;
  CHECK_FALSE(truncate_sample(prompt_only, 4));
  CHECK(prompt_only.size() == 4);
  CHECK(prompt_only.prompt_len == 4);

  SftSample shorter = sample;
  CHECK_FALSE(truncate_sample(shorter, 2));
  CHECK(shorter.prompt_len == 2);
  CHECK_THROWS_AS(truncate_sample(shorter, 0), std::invalid_argument);
}

}  // namespace
}  // namespace meshrun
