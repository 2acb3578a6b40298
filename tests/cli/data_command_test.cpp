// `meshrun data RECIPE`: the first samples of a recipe's data through the
// built executable, compared with what the data loaders give the runs
// (SFT prompt/response and chat, DPO pairs, PPO prompts and labels, the
// evaluation set, truncation), its JSON form, and its errors.
#include <doctest/doctest.h>

#include <filesystem>
#include <numeric>
#include <string>

#include <nlohmann/json.hpp>

#include "lint/run_meshrun.hpp"
#include "meshrun/data/data.hpp"
#include "meshrun/data/preference.hpp"
#include "meshrun/data/prompts.hpp"
#include "tokenizer/tokenizer_test_support.hpp"

namespace meshrun {
namespace {

using nlohmann::json;
using test::contains;
using test::run_meshrun;
using test::TempDir;

const std::string kRecipes = std::string(MESHRUN_SOURCE_DIR) + "/recipes/";

// A ChatML template with {% generation %} blocks around each reply and
// Qwen3's empty think block when enable_thinking is false.
const std::string kChatTemplate =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% generation %}{{ m.content }}<|im_end|>{% endgeneration %}{{ '\\n' }}"
    "{% else %}{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// GPT-2's byte-to-character map, as UTF-8.
std::string byte_char(int byte) {
  int extra = 0;
  int code = byte;
  const auto printable = [](int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; };
  if (!printable(byte)) {
    for (int b = 0; b < byte; ++b) extra += printable(b) ? 0 : 1;
    code = 256 + extra;
  }
  std::string out;
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
  return out;
}

// A byte-level BPE tokenizer without merges (one token a byte) and
// ChatML's special tokens: <|endoftext|> 256, <|im_start|> 257,
// <|im_end|> 258 (eos).
std::string write_chat_tokenizer(const TempDir& dir, const std::string& name) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  json added = json::array();
  const char* specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  for (int i = 0; i < 3; ++i)
    added.push_back({{"id", 256 + i}, {"content", specials[i]}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", true}});
  const json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                           {"use_regex", true}};
  const json tokenizer = {{"added_tokens", added},
                          {"normalizer", nullptr},
                          {"pre_tokenizer", byte_level},
                          {"post_processor", nullptr},
                          {"decoder", byte_level},
                          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  const json config = {{"bos_token", nullptr},
                       {"eos_token", "<|im_end|>"},
                       {"pad_token", "<|endoftext|>"},
                       {"chat_template", kChatTemplate}};
  dir.write(name + "/tokenizer.json", tokenizer.dump());
  dir.write(name + "/tokenizer_config.json", config.dump());
  return dir / name;
}

// The settings of an SFT recipe of the tiny model, its data in `data`.
std::string sft_recipe(const std::string& data, const std::string& extra = "") {
  return "name = \"data-view\"\nalgorithm = \"sft\"\n\n[launch]\ntype = \"local\"\nnodes = 1\nprocs_per_node = 1\n"
         "device = \"cpu\"\nbackend = \"gloo\"\n\n[batch]\nmicro_train = 1\ntrain = 1\n\n[roles.actor]\n"
         "model = \"builtin:tiny\"\ndtype = \"fp32\"\n\n[data]\npath = \"" +
         data + "\"\nmax_len = 256\n" + extra;
}

const std::string kChat =
    R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},)"
    R"( {"role": "user", "content": "More?"}, {"role": "assistant", "content": "Sure."}]})";

TEST_CASE("meshrun data: chat samples through the template, the loss on the assistant turns only") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  write_chat_tokenizer(dir, "tok");
  dir.write("chat.jsonl", kChat + "\n");
  dir.write("sft.toml", sft_recipe("chat.jsonl", "tokenizer = \"tok\"\n"));

  // What the run's loader makes of it.
  DataConfig config;
  config.path = dir / "chat.jsonl";
  config.max_len = 256;
  auto tokenizer = load_tokenizer(dir / "tok");
  const SftSample sample = load_sft_dataset(config, *tokenizer).samples.at(0);
  REQUIRE(sample.loss_tokens() == 13);  // "Hello!<|im_end|>" and "Sure.<|im_end|>", a token a byte

  auto shown = run_meshrun({"data", dir / "sft.toml"});
  INFO(shown.err);
  CHECK(shown.exit_code == 0);
  CHECK(shown.out.starts_with("sft data " + dir / "chat.jsonl" + " (max_len 256, loss_turns all)\n"));
  CHECK(shown.out.find("\ntokenizer ") != std::string::npos);
  CHECK(shown.out.find("=== sample 1/1 (" + dir / "chat.jsonl" + ":1): " + std::to_string(sample.size()) +
                       " tokens, " + std::to_string(sample.loss_tokens()) + " in the loss\n"
                       "  context | <|im_start|>user\\n\n"
                       "  context | Hi<|im_end|>\\n\n"
                       "  context | <|im_start|>assistant\\n\n"
                       "  loss    | Hello!<|im_end|>\n"
                       "  context | \\n\n"
                       "  context | <|im_start|>user\\n\n"
                       "  context | More?<|im_end|>\\n\n"
                       "  context | <|im_start|>assistant\\n\n"
                       "  loss    | Sure.<|im_end|>\n"
                       "  context | \\n\n") != std::string::npos);
  CHECK(shown.out.ends_with("read the whole file: " + load_sft_dataset(config, *tokenizer).stats.summary() + "\n"));

  // loss_turns = "last": the first reply is context.
  auto last = run_meshrun({"data", dir / "sft.toml", "--set", "data.loss_turns=\"last\""});
  CHECK(last.exit_code == 0);
  CHECK_MESSAGE(last.out.find("  context | <|im_start|>assistant\\n\n  context | Hello!<|im_end|>\\n\n") !=
                    std::string::npos,
                last.out);
  CHECK(last.out.find("  loss    | Hello!") == std::string::npos);
  CHECK(last.out.find("  loss    | Sure.<|im_end|>\n") != std::string::npos);

  // chat_template_kwargs reach the template.
  auto thinking = run_meshrun({"data", dir / "sft.toml", "--set", "data.chat_template_kwargs={enable_thinking=false}"});
  CHECK(thinking.exit_code == 0);
  CHECK(thinking.out.find("chat_template_kwargs {\"enable_thinking\":false}") != std::string::npos);
  CHECK_MESSAGE(thinking.out.find("  context | <|im_start|>assistant\\n\n  context | <think>\\n\n  context | \\n\n"
                                  "  context | </think>\\n\n  context | \\n\n  loss    | Hello!<|im_end|>\n") !=
                    std::string::npos,
                thinking.out);
  CHECK(shown.out.find("<think>") == std::string::npos);
}

TEST_CASE("meshrun data: prompt/response samples with the recipe's keys, as the loader tokenises them") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  dir.write("qa.jsonl", "{\"question\": \"2+2=\", \"answer\": \"4\"}\n\n{\"question\": \"3+3=\", \"answer\": \"6\"}\n"
                        "{\"question\": \"4+4=\", \"answer\": \"8\"}\n");
  dir.write("sft.toml", sft_recipe("qa.jsonl", "input_key = \"question\"\noutput_key = \"answer\"\n"));
  auto shown = run_meshrun({"data", dir / "sft.toml", "--samples", "2"});
  INFO(shown.err);
  CHECK(shown.exit_code == 0);
  // builtin:tiny is byte-level: <|bos|> + the prompt, then the answer and <|eos|>.
  CHECK(shown.out.find("=== sample 1/2 (" + dir / "qa.jsonl" + ":1): 7 tokens, 2 in the loss\n"
                       "  context | <|bos|>2+2=\n"
                       "  loss    | 4<|eos|>\n"
                       "=== sample 2/2 (" + dir / "qa.jsonl" + ":3): 7 tokens, 2 in the loss\n"
                       "  context | <|bos|>3+3=\n"
                       "  loss    | 6<|eos|>\n") != std::string::npos);
  CHECK(shown.out.find("4+4=") == std::string::npos);
  // Two non-blank lines were enough: the third was never read.
  CHECK(shown.out.ends_with("read its first lines only: 2 samples (14 tokens, 4 loss tokens) from 2 lines\n"));

  auto missing_key = run_meshrun({"data", dir / "sft.toml", "--set", "data.output_key=\"reply\""});
  CHECK(missing_key.exit_code == 1);
  CHECK(missing_key.err.find(dir / "qa.jsonl" + ":1") != std::string::npos);
  CHECK(missing_key.err.find("reply") != std::string::npos);
}

TEST_CASE("meshrun data: truncation to data.max_len, and samples it drops skipped like the run skips them") {
  REQUIRE(test::meshrun_built());
  const std::string data = kRecipes + "data/sft_tiny.jsonl";
  // Line 1 is "reverse: daczsb\n" -> "bszcad": 17 prompt tokens with <|bos|>.
  auto cut = run_meshrun({"data", kRecipes + "sft-tiny.toml", "--samples", "1", "--set", "data.max_len=20"});
  INFO(cut.err);
  CHECK(cut.exit_code == 0);
  CHECK(cut.out.find("=== sample 1/1 (" + data + ":1): 20 tokens, 3 in the loss\n"
                     "  context | <|bos|>reverse: daczsb\\n\n"
                     "  loss    | bsz\n") != std::string::npos);
  CHECK(cut.out.find("1 truncated to max_len") != std::string::npos);

  // max_len 17: lines 1 and 2 have prompts of 17 and 19 tokens and are
  // dropped; line 3's "reverse: lut\n" keeps "tu" of its reply.
  auto dropped = run_meshrun({"data", kRecipes + "sft-tiny.toml", "--samples", "1", "--set", "data.max_len=17"});
  CHECK(dropped.exit_code == 0);
  CHECK(dropped.out.find("=== sample 1/1 (" + data + ":3): 17 tokens, 3 in the loss\n"
                         "  context | <|bos|>reverse: lut\\n\n"
                         "  loss    | tul\n") != std::string::npos);
  CHECK(dropped.out.find("3 dropped (3 prompt fills max_len") != std::string::npos);  // lines 1, 2 and 4
}

TEST_CASE("meshrun data: DPO pairs show the prompt, chosen and rejected") {
  REQUIRE(test::meshrun_built());
  const std::string data = kRecipes + "data/preference_tiny.jsonl";
  auto shown = run_meshrun({"data", kRecipes + "dpo-tiny.toml", "--samples", "2"});
  INFO(shown.err);
  CHECK(shown.exit_code == 0);
  // {"prompt": "answer nzjljfy: ", "chosen": "likebadg", "rejected": "ytrvzsxx"}
  CHECK(shown.out.find("=== pair 1/2 (" + data + ":1): chosen 26 tokens, 9 in the loss; rejected 26 tokens, 9 in "
                       "the loss\n"
                       "  -- prompt (17 tokens)\n"
                       "  context | <|bos|>answer nzjljfy: \n"
                       "  -- chosen\n"
                       "  loss    | likebadg<|eos|>\n"
                       "  -- rejected\n"
                       "  loss    | ytrvzsxx<|eos|>\n"
                       "=== pair 2/2 (" + data + ":2)") != std::string::npos);

  auto eval = run_meshrun({"data", kRecipes + "dpo-tiny.toml", "--samples", "1", "--eval"});
  CHECK(eval.exit_code == 0);
  CHECK(eval.out.starts_with("dpo evaluation data " + kRecipes + "data/preference_tiny_eval.jsonl"));
  CHECK(eval.out.find("  loss    | mbel<|eos|>\n") != std::string::npos);
  CHECK(eval.out.find("likebadg") == std::string::npos);
}

TEST_CASE("meshrun data: PPO prompts as the rollout sees them, with their labels") {
  REQUIRE(test::meshrun_built());
  const std::string data = kRecipes + "data/grpo_tiny_prompts.jsonl";
  auto shown = run_meshrun({"data", kRecipes + "grpo-tiny.toml", "--samples", "2"});
  INFO(shown.err);
  CHECK(shown.exit_code == 0);
  CHECK(shown.out.find("(rollout.max_prompt_len 32, label_key \"answer\")") != std::string::npos);
  CHECK(shown.out.find("=== prompt 1/2 (" + data + ":1): 13 tokens\n"
                       "  prompt  | <|bos|>nvvz say aa:\n"
                       "  label   | \"a\"\n"
                       "=== prompt 2/2 (" + data + ":2): 13 tokens\n"
                       "  prompt  | <|bos|>kyyw say ee:\n"
                       "  label   | \"e\"\n") != std::string::npos);

  // A chat prompt gets the generation prompt; max_prompt_len keeps the end.
  TempDir dir;
  const std::string tokenizer = write_chat_tokenizer(dir, "tok");
  dir.write("chat.jsonl", R"({"messages": [{"role": "user", "content": "Name a color."}], "answer": ["red"]})"
                          "\n");
  auto chat = run_meshrun({"data", kRecipes + "grpo-tiny.toml", "--set", "data.path=\"" + dir / "chat.jsonl" + "\"",
                           "--set", "data.tokenizer=\"" + tokenizer + "\""});
  INFO(chat.err);
  CHECK(chat.exit_code == 0);
  CHECK(chat.out.find("=== prompt 1/1 (" + dir / "chat.jsonl" + ":1): 32 tokens\n"
                      "  prompt  | <|im_start|>user\\n\n"
                      "  prompt  | Name a color.<|im_end|>\\n\n"
                      "  prompt  | <|im_start|>assistant\\n\n"
                      "  label   | [\"red\"]\n") != std::string::npos);
  auto cut = run_meshrun({"data", kRecipes + "grpo-tiny.toml", "--set", "data.path=\"" + dir / "chat.jsonl" + "\"",
                          "--set", "data.tokenizer=\"" + tokenizer + "\"", "--set", "rollout.max_prompt_len=14"});
  CHECK(cut.exit_code == 0);
  CHECK(cut.out.find("): 14 tokens\n  prompt  | .<|im_end|>\\n\n  prompt  | <|im_start|>assistant\\n\n") !=
        std::string::npos);
  CHECK(cut.out.find("1 cut to their last rollout.max_prompt_len = 14 tokens") != std::string::npos);
}

TEST_CASE("meshrun data --format json: the ids and masks the loader makes, and the spans") {
  REQUIRE(test::meshrun_built());
  auto shown = run_meshrun({"data", kRecipes + "sft-tiny.toml", "--samples", "3", "--format", "json"});
  INFO(shown.err);
  REQUIRE(shown.exit_code == 0);
  const json out = json::parse(shown.out);
  CHECK(out["algorithm"] == "sft");
  CHECK(out["eval"] == false);
  CHECK(out["path"] == kRecipes + "data/sft_tiny.jsonl");
  CHECK(out["tokenizer"]["source"] == "builtin:tiny");
  CHECK(out["read"]["whole_file"] == false);
  CHECK(out["read"]["lines"] == 3);

  DataConfig config;
  config.path = kRecipes + "data/sft_tiny.jsonl";
  config.max_len = 64;
  auto tokenizer = load_tokenizer("builtin:tiny");
  const SftDataset dataset = load_sft_dataset(config, *tokenizer);
  REQUIRE(out["samples"].size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    const json& sample = out["samples"][i];
    const SftSample& expected = dataset.samples[i];
    CAPTURE(i);
    CHECK(sample["index"] == i + 1);
    CHECK(sample["line"] == expected.line);
    CHECK(sample["ids"].get<std::vector<int32_t>>() == expected.input_ids);
    CHECK(sample["loss_mask"].get<std::vector<uint8_t>>() == expected.loss_mask);
    CHECK(sample["tokens"] == expected.size());
    CHECK(sample["loss_tokens"] == expected.loss_tokens());
    std::string text, loss_text;
    for (const json& segment : sample["segments"]) {
      text += segment["text"].get<std::string>();
      if (segment["loss"] == true) loss_text += segment["text"].get<std::string>();
    }
    CHECK(text == tokenizer->decode(expected.input_ids, false));
    const auto response = std::span(expected.input_ids).subspan(static_cast<std::size_t>(expected.prompt_len));
    CHECK(loss_text == tokenizer->decode(response, false));
  }

  auto pairs = run_meshrun({"data", kRecipes + "rm-tiny.toml", "--samples", "1", "--format", "json"});
  REQUIRE(pairs.exit_code == 0);
  const json pair = json::parse(pairs.out)["samples"].at(0);
  CHECK(pair["prompt"]["text"] == "<|bos|>answer nzjljfy: ");
  CHECK(pair["prompt"]["tokens"] == 17);
  CHECK(pair["chosen"]["loss_tokens"] == 9);
  CHECK(pair["chosen"]["ids"].size() == pair["chosen"]["loss_mask"].size());
  CHECK(pair["rejected"]["segments"].back()["text"] == "ytrvzsxx<|eos|>");

  auto prompts = run_meshrun({"data", kRecipes + "grpo-tiny.toml", "--samples", "1", "--format", "json"});
  REQUIRE(prompts.exit_code == 0);
  const json prompt = json::parse(prompts.out)["samples"].at(0);
  CHECK(prompt["text"] == "<|bos|>nvvz say aa:");
  CHECK(prompt["label"] == "a");
  CHECK(prompt["ids"].size() == prompt["tokens"].get<std::size_t>());
}

TEST_CASE("meshrun data: errors") {
  REQUIRE(test::meshrun_built());
  for (const char* samples : {"0", "1001", "-3"}) {
    auto bad = run_meshrun({"data", kRecipes + "sft-tiny.toml", "--samples", samples});
    CHECK(bad.exit_code == 2);
    CHECK(bad.err.find("--samples must be between 1 and 1000") != std::string::npos);
    CHECK(bad.out.empty());
  }

  auto no_eval = run_meshrun({"data", kRecipes + "sft-tiny.toml", "--eval"});
  CHECK(no_eval.exit_code == 1);
  CHECK(no_eval.err.find("sft-tiny.toml") != std::string::npos);
  CHECK(no_eval.err.find("sets no data.eval_path") != std::string::npos);
  auto ppo_eval = run_meshrun({"data", kRecipes + "grpo-tiny.toml", "--eval"});
  CHECK(ppo_eval.exit_code == 1);
  CHECK(ppo_eval.err.find("a ppo run does not evaluate") != std::string::npos);

  // A missing data file is the recipe's lint error at data.path's line.
  TempDir dir;
  dir.write("sft.toml", sft_recipe("absent.jsonl"));
  auto missing = run_meshrun({"data", dir / "sft.toml"});
  CHECK(missing.exit_code == 1);
  CHECK(missing.err.find(dir / "sft.toml:20") != std::string::npos);
  CHECK(missing.err.find("does not exist") != std::string::npos);
  CHECK(missing.out.empty());

  // A bad line is located like the run locates it.
  dir.write("bad.jsonl", "{\"input\": \"a\", \"output\": \"b\"}\nnot json\n");
  dir.write("bad.toml", sft_recipe("bad.jsonl"));
  auto bad_line = run_meshrun({"data", dir / "bad.toml"});
  CHECK(bad_line.exit_code == 1);
  CHECK(bad_line.err.find(dir / "bad.jsonl:2") != std::string::npos);

  // A tokenizer that is not there (lint's error, at data.tokenizer).
  dir.write("good.jsonl", "{\"input\": \"a\", \"output\": \"b\"}\n");
  dir.write("good.toml", sft_recipe("good.jsonl", "tokenizer = \"nowhere\"\n"));
  auto no_tokenizer = run_meshrun({"data", dir / "good.toml"});
  CHECK(no_tokenizer.exit_code == 1);
  CHECK(no_tokenizer.err.find("tokenizer nowhere") != std::string::npos);
  CHECK(no_tokenizer.err.find(dir / "good.toml:22") != std::string::npos);
  // One that is there but does not load: lint's error too, at the key.
  dir.write("broken/tokenizer.json", "{\"model\": ");
  dir.write("broken.toml", sft_recipe("good.jsonl", "tokenizer = \"broken\"\n"));
  auto broken = run_meshrun({"data", dir / "broken.toml"});
  CHECK(broken.exit_code == 1);
  CHECK(broken.err.find("the tokenizer does not load") != std::string::npos);
  CHECK(broken.err.find(dir / "broken.toml:22") != std::string::npos);
  CHECK(broken.err.find(dir / "broken/tokenizer.json") != std::string::npos);
  CHECK(broken.out.empty());
}

}  // namespace
}  // namespace meshrun
