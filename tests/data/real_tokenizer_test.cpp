// The dataset with the project's own tokenizers (src/tokenizer/): the
// builtin byte tokenizer, and Llama 3 / Qwen2 style tokenizer.json models
// with their chat templates, written by tests/tokenizer/make_bpe_tokenizer.py.
// The loss must cover exactly the assistant's reply as the template writes
// it, end-of-turn token included.
#include <doctest/doctest.h>

#include <cstdlib>
#include <sys/wait.h>

#include "data_test_support.hpp"
#include "meshrun/data/dataset.hpp"

namespace meshrun {
namespace {

using data_test::data_config;
using data_test::ScratchFolder;

// The text of the tokens the loss covers.
std::string loss_text(const SftSample& sample, const Tokenizer& tokenizer) {
  std::vector<int32_t> ids;
  for (std::size_t i = 0; i < sample.input_ids.size(); ++i) {
    if (sample.loss_mask[i] == 1) ids.push_back(sample.input_ids[i]);
  }
  return tokenizer.decode(ids, false);
}

std::string prompt_text(const SftSample& sample, const Tokenizer& tokenizer) {
  return tokenizer.decode(std::span<const int32_t>(sample.input_ids.data(), static_cast<std::size_t>(sample.prompt_len)),
                          false);
}

std::unique_ptr<Tokenizer> make_bpe(const ScratchFolder& folder, const std::string& kind) {
  const std::string dir = (folder.root() / kind).string();
  const std::string command = "/usr/bin/python3 '" + std::string(MESHRUN_SOURCE_DIR) +
                              "/tests/tokenizer/make_bpe_tokenizer.py' " + kind + " '" + dir + "'";
  const int status = std::system(command.c_str());
  REQUIRE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  return load_tokenizer(dir);
}

constexpr const char* kLines = R"({"input": "Question: what is 2+2?\nAnswer:", "output": " 4, of course."}
{"messages": [{"role": "user", "content": "Say hello to the world"}, {"role": "assistant", "content": "Hello world!"}]}
)";

TEST_CASE("builtin:bytes: bos on prompt/response, the plain template plus eos on chat") {
  ScratchFolder folder;
  const auto tokenizer = load_tokenizer("builtin:bytes");
  const SftDataset dataset = load_sft_dataset(data_config(folder.write("d.jsonl", kLines)), *tokenizer);
  REQUIRE(dataset.samples.size() == 2);
  CHECK(prompt_text(dataset.samples[0], *tokenizer) == "<|bos|>Question: what is 2+2?\nAnswer:");
  CHECK(loss_text(dataset.samples[0], *tokenizer) == " 4, of course.<|eos|>");
  CHECK(prompt_text(dataset.samples[1], *tokenizer) == "<|user|>\nSay hello to the world\n<|assistant|>\n");
  CHECK(loss_text(dataset.samples[1], *tokenizer) == "Hello world!\n<|eos|>");
}

TEST_CASE("Llama 3 layout: <|begin_of_text|> from the post-processor or the template, <|eot_id|> ends the turn") {
  ScratchFolder folder;
  const auto tokenizer = make_bpe(folder, "llama3");
  const SftDataset dataset = load_sft_dataset(data_config(folder.write("d.jsonl", kLines)), *tokenizer);
  REQUIRE(dataset.samples.size() == 2);
  CHECK(prompt_text(dataset.samples[0], *tokenizer) == "<|begin_of_text|>Question: what is 2+2?\nAnswer:");
  CHECK(loss_text(dataset.samples[0], *tokenizer) == " 4, of course.<|eot_id|>");
  CHECK(prompt_text(dataset.samples[1], *tokenizer) ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nSay hello to the world<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  // The template's own <|eot_id|> is the eos: none is added after it.
  CHECK(loss_text(dataset.samples[1], *tokenizer) == "Hello world!<|eot_id|>");
}

TEST_CASE("Qwen2 layout: the default system prompt is prompt, <|im_end|> and the newline are trained on") {
  ScratchFolder folder;
  const auto tokenizer = make_bpe(folder, "qwen2");
  const SftDataset dataset = load_sft_dataset(data_config(folder.write("d.jsonl", kLines)), *tokenizer);
  REQUIRE(dataset.samples.size() == 2);
  CHECK(prompt_text(dataset.samples[1], *tokenizer) ==
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nSay hello to the "
        "world<|im_end|>\n<|im_start|>assistant\n");
  CHECK(loss_text(dataset.samples[1], *tokenizer) == "Hello world!<|im_end|>\n");
  CHECK(loss_text(dataset.samples[0], *tokenizer) == " 4, of course.<|im_end|>");
}

}  // namespace
}  // namespace meshrun
