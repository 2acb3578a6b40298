// Tests of src/data/sft_tokenize.cpp: which tokens a record becomes, where
// the loss mask lies, and truncation.
#include <algorithm>

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
  const SftSample sample = tokenize_sft_record(prompt_response("Q:", "A!"), tokenizer, "f.jsonl", LossTurns::all);
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
  const SftSample sample = tokenize_sft_record(prompt_response("ab", "cd"), tokenizer, "f.jsonl", LossTurns::all);
  CHECK(sample.input_ids == bytes_of("abcd"));
  CHECK(sample.loss_mask == mask(2, 2));
}

TEST_CASE("an empty prompt never makes the first token a target") {
  FakeTokenizer tokenizer;
  tokenizer.add_bos = false;
  const SftSample sample = tokenize_sft_record(prompt_response("", "xy"), tokenizer, "f.jsonl", LossTurns::all);
  CHECK(sample.input_ids == concat(bytes_of("xy"), {kEos}));
  CHECK(sample.prompt_len == 0);
  CHECK(sample.loss_mask == std::vector<uint8_t>{0, 1, 1});
}

TEST_CASE("a merge across the prompt/response boundary keeps the boundary") {
  FakeTokenizer tokenizer;
  tokenizer.merge = "ab";  // "a" + "b" jointly would be one token, 259
  const SftSample sample = tokenize_sft_record(prompt_response("xa", "by"), tokenizer, "f.jsonl", LossTurns::all);
  CHECK(sample.input_ids == concat(concat({kBos}, bytes_of("xa")), concat(bytes_of("by"), {kEos})));
  CHECK(sample.loss_mask == mask(3, 3));
  // Away from the boundary the joint encoding is kept.
  const SftSample inside = tokenize_sft_record(prompt_response("x", "aby"), tokenizer, "f.jsonl", LossTurns::all);
  CHECK(inside.input_ids == std::vector<int32_t>{kBos, 'x', 259, 'y', kEos});
  CHECK(inside.loss_mask == mask(2, 3));
}

TEST_CASE("chat: the full conversation, the loss on the last assistant message only") {
  FakeTokenizer tokenizer;
  const SftRecord record = chat({{"system", "S"}, {"user", "hi"}, {"assistant", "yo"}});
  const SftSample sample = tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::all);
  const std::string prompt_text = "<|system|>\nS\n<|user|>\nhi\n<|assistant|>\n";
  // The template writes no eos, so one is appended; no bos (add_special = false).
  CHECK(sample.input_ids == concat(bytes_of(prompt_text + "yo\n"), {kEos}));
  CHECK(sample.prompt_len == static_cast<int>(prompt_text.size()));
  CHECK(sample.loss_mask == mask(prompt_text.size(), 4));
}

TEST_CASE("chat: a template that ends the turn with eos gets no second one") {
  FakeTokenizer tokenizer;
  tokenizer.template_writes_eos = true;
  const SftSample sample = tokenize_sft_record(chat({{"user", "u"}, {"assistant", "a"}}), tokenizer, "f.jsonl", LossTurns::all);
  const std::string prompt_text = "<|user|>\nu\n<|assistant|>\n";
  CHECK(sample.input_ids == concat(concat(bytes_of(prompt_text + "a"), {kEos}), bytes_of("\n")));
  CHECK(sample.loss_mask == mask(prompt_text.size(), 3));
}

TEST_CASE("chat, loss_turns last: earlier assistant turns are prompt, not trained on") {
  FakeTokenizer tokenizer;
  const SftSample sample = tokenize_sft_record(
      chat({{"user", "1"}, {"assistant", "one"}, {"user", "2"}, {"assistant", "two"}}), tokenizer, "f.jsonl",
      LossTurns::last);
  const std::string prompt_text = "<|user|>\n1\n<|assistant|>\none\n<|user|>\n2\n<|assistant|>\n";
  CHECK(sample.prompt_len == static_cast<int>(prompt_text.size()));
  CHECK(sample.loss_tokens() == 5);  // "two\n" + eos
}

// The mask as a string: '1' where the loss applies.
std::string mask_text(const SftSample& sample) {
  std::string out;
  for (const uint8_t bit : sample.loss_mask) out += bit ? '1' : '0';
  return out;
}

// Which characters of the byte-level text are trained: '_' for the rest.
std::string trained_text(const SftSample& sample) {
  std::string out;
  for (std::size_t i = 0; i < sample.input_ids.size(); ++i) {
    if (!sample.loss_mask[i]) continue;
    const int32_t id = sample.input_ids[i];
    out += id < 256 ? std::string(1, static_cast<char>(id)) : id == kEos ? "<eos>" : id == 259 ? "<merged>" : "<?>";
  }
  return out;
}

TEST_CASE("chat, loss_turns all: every assistant turn, found by rendering prefix by prefix") {
  FakeTokenizer tokenizer;
  const SftRecord record =
      chat({{"system", "s"}, {"user", "1"}, {"assistant", "one"}, {"user", "2"}, {"assistant", "two"}});
  const SftSample sample = tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::all);
  // Each turn ends where the template's rendering of it ends (its "\n").
  CHECK(trained_text(sample) == "one\ntwo\n<eos>");
  const std::string before_one = "<|system|>\ns\n<|user|>\n1\n<|assistant|>\n";
  CHECK(sample.prompt_len == static_cast<int>(before_one.size()));
  CHECK(mask_text(sample).substr(0, before_one.size()) == std::string(before_one.size(), '0'));
  // loss_turns last on the same record trains a strict subset.
  const SftSample last = tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::last);
  CHECK(trained_text(last) == "two\n<eos>");
  CHECK(last.input_ids == sample.input_ids);

  // A template that ends assistant turns with eos: each turn learns to stop, no eos appended.
  tokenizer.template_writes_eos = true;
  const SftSample stops = tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::all);
  CHECK(trained_text(stops) == "one<eos>\ntwo<eos>\n");
}

TEST_CASE("chat, loss_turns all: a template that does not render prefix by prefix is a located error") {
  FakeTokenizer tokenizer;
  // Earlier assistant turns are rendered without their text once a later turn follows (like templates that drop
  // past reasoning): messages[:3] rendered alone is not a prefix of the whole.
  tokenizer.jinja = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}<{{ m.role }}>{% if m.role != 'assistant' or loop.last %}{{ m.content }}{% endif %}"
      "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}",
      "drops.jinja");
  const SftRecord record = chat({{"user", "1"}, {"assistant", "one"}, {"user", "2"}, {"assistant", "two"}});
  try {
    tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::all);
    FAIL("expected DataError");
  } catch (const DataError& error) {
    REQUIRE(error.problems().size() == 1);
    CHECK(error.problems()[0].str().starts_with("f.jsonl:9: the chat template renders the conversation up to the "
                                                "assistant's message (message 2)"));
    CHECK(error.problems()[0].message.find("loss_turns = \"last\"") != std::string::npos);
  }
  // The final turn alone is still placed.
  CHECK(trained_text(tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::last)) == "two<eos>");
}

TEST_CASE("chat: {% generation %} blocks mark the trained text") {
  FakeTokenizer tokenizer;
  tokenizer.template_writes_eos = true;
  // Only the reply's content and its end token are marked; the "\n" after them and the role headers are not.
  tokenizer.jinja = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}[{{ m.role }}]{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
      "{{ eos_token }}{% endgeneration %}\n{% else %}{{ m.content }}\n{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}",
      "marked.jinja");
  const SftRecord record = chat({{"user", "1"}, {"assistant", "one"}, {"user", "2"}, {"assistant", "two"}});
  const SftSample all = tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::all);
  CHECK(trained_text(all) == "one<eos>two<eos>");
  // eos is inside the last turn: none appended (trim_blocks eats the "\n" after the block tag).
  CHECK(std::count(all.input_ids.begin(), all.input_ids.end(), kEos) == 2);
  CHECK(trained_text(tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::last)) == "two<eos>");

  // A marked template that marks nothing of this conversation is an error, not a sample without loss.
  tokenizer.jinja = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}{% if m.role == 'tool' %}{% generation %}{{ m.content }}{% endgeneration %}"
      "{% else %}{{ m.content }}{% endif %}{% endfor %}",
      "tools-only.jinja");
  CHECK_THROWS_WITH_AS(tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::all),
                       doctest::Contains("f.jsonl:9: the chat template's {% generation %} blocks marked none"),
                       DataError);
}

TEST_CASE("chat: a message's other keys (tool_calls, name, reasoning_content) reach the template; a record's tools are refused") {
  data_test::ScratchFolder folder;
  const std::string path = folder.write("tools.jsonl",
      R"({"messages": [{"role": "user", "content": "hi", "name": "bob"}, )"
      R"({"role": "assistant", "content": "x", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1}}}], "reasoning_content": "hmm"}]})"
      "\n");
  const std::vector<SftRecord> records = read_sft_records(data_test::data_config(path));
  REQUIRE(records.size() == 1);
  FakeTokenizer tokenizer;
  tokenizer.template_writes_eos = true;
  tokenizer.jinja = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}[{{ m.role }}{% if m.name is defined %}:{{ m.name }}{% endif %}]"
      "{% if m.reasoning_content is defined %}<think>{{ m.reasoning_content }}</think>{% endif %}{{ m.content }}"
      "{% for call in m.tool_calls or [] %}<call>{{ call.function.name }}{{ call.function.arguments | tojson }}</call>"
      "{% endfor %}{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}"
      "{% if add_generation_prompt %}[assistant]{% endif %}",
      "tools.jinja");
  const SftSample sample = tokenize_sft_record(records[0], tokenizer, path, LossTurns::last);
  std::string text;
  for (const int32_t id : sample.input_ids) text += id < 256 ? std::string(1, static_cast<char>(id)) : "<" + std::to_string(id) + ">";
  CHECK(text.find("[user:bob]hi") != std::string::npos);
  CHECK(trained_text(sample) == "<think>hmm</think>x<call>f{\"a\": 1}</call><eos>");

  // Tool definitions beside the messages would be left out: a located problem.
  const std::string with_tools = folder.write("with_tools.jsonl",
      R"({"tools": [{"type": "function"}], "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]})"
      "\n");
  CHECK_THROWS_WITH_AS(read_sft_records(data_test::data_config(with_tools)),
                       doctest::Contains("with_tools.jsonl:1: key \"tools\": a record's tool definitions are not passed"),
                       DataError);
}

TEST_CASE("chat: a token straddling a {% generation %} boundary is trained (as Hugging Face's mask does)") {
  FakeTokenizer tokenizer;
  tokenizer.merge = "]o";  // "]" ends the header, "o" starts the reply: one token across the boundary
  tokenizer.jinja = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}[{{ m.role }}]{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
      "{% endgeneration %}{% else %}{{ m.content }}{% endif %}{% endfor %}",
      "merge.jinja");
  const SftSample sample =
      tokenize_sft_record(chat({{"user", "u"}, {"assistant", "ok"}}), tokenizer, "f.jsonl", LossTurns::all);
  // The reply "ok" starts inside the merged "]o" token, which holds reply text: it is trained.
  CHECK(trained_text(sample) == "<merged>k<eos>");
}

TEST_CASE("chat: a prompt that is not a prefix of the conversation is an error naming the line") {
  FakeTokenizer tokenizer;
  tokenizer.generation_prompt = "<|assistant|> ";  // the full text has "<|assistant|>\n"
  try {
    tokenize_sft_record(chat({{"user", "u"}, {"assistant", "a"}}), tokenizer, "f.jsonl", LossTurns::all);
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
  CHECK_THROWS_WITH_AS(tokenize_sft_record(prompt_response("x", "BOOM"), tokenizer, "f.jsonl", LossTurns::all),
                       doctest::Contains("f.jsonl:7: tokenizer: fake tokenizer refuses \"BOOM\""), DataError);
}

TEST_CASE("chat: a record with too many messages, or too costly to place per turn, is a located error") {
  FakeTokenizer tokenizer;
  std::vector<ChatMessage> messages;
  for (int i = 0; i < 4097; ++i) messages.push_back({i % 2 ? "assistant" : "user", "x"});
  CHECK_THROWS_WITH_AS(tokenize_sft_record(chat(messages), tokenizer, "f.jsonl", LossTurns::all),
                       doctest::Contains("f.jsonl:9: a conversation of 4097 messages; at most 4096"), DataError);
  // Within the message bound, re-encoding every prefix (turns x length) is bounded too.
  messages.assign(4000, {});
  for (int i = 0; i < 4000; ++i) messages[static_cast<std::size_t>(i)] = {i % 2 ? "assistant" : "user", std::string(100, 'x')};
  CHECK_THROWS_WITH_AS(tokenize_sft_record(chat(messages), tokenizer, "f.jsonl", LossTurns::all),
                       doctest::Contains("f.jsonl:9: placing the loss on each assistant turn would re-encode more "
                                         "than 128 MiB"),
                       DataError);
  tokenizer.jinja = std::make_shared<const ChatTemplate>(
      "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}{% endgeneration %}"
      "{% else %}{{ m.content }}{% endif %}{% endfor %}",
      "marked.jinja");
  CHECK_THROWS_WITH_AS(tokenize_sft_record(chat(messages), tokenizer, "f.jsonl", LossTurns::all),
                       doctest::Contains("would re-encode more than 128 MiB"), DataError);
}

TEST_CASE("chat: a message past the template's string bound is a located error, not an abort") {
  FakeTokenizer tokenizer;
  tokenizer.jinja = std::make_shared<const ChatTemplate>("{% for m in messages %}{{ m.content }}{% endfor %}", "t.jinja");
  const SftRecord record = chat({{"user", "u"}, {"assistant", std::string((32u << 20) + 1, 'a')}});
  CHECK_THROWS_WITH_AS(tokenize_sft_record(record, tokenizer, "f.jsonl", LossTurns::last),
                       doctest::Contains("f.jsonl:9: tokenizer: t.jinja: chat template a string of more than 32 MiB"),
                       DataError);
}

TEST_CASE("truncation keeps the start and drops samples without a loss token") {
  FakeTokenizer tokenizer;
  SftSample sample = tokenize_sft_record(prompt_response("abc", "defg"), tokenizer, "f.jsonl", LossTurns::all);  // 4 + 5 tokens
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
  CHECK_THROWS_AS(truncate_sample(shorter, 0), ConfigError);
}

}  // namespace
}  // namespace meshrun
