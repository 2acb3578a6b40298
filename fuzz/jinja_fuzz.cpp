// Feeds chat templates to the Jinja parser and renders each one that parses
// with fixed messages and a conversation with tool calls. Expected: a
// TokenizerError, the interpreter's budgets included; finding: anything else,
// a hang past the step budget among them (fuzz_support.hpp).
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_support.hpp"
#include "meshrun/error.hpp"
#include "meshrun/tokenizer/chat_template.hpp"

using namespace meshrun;

namespace {

const nlohmann::ordered_json& conversation() {
  static const nlohmann::ordered_json value = nlohmann::ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "What is 2 + 2? Use the tool."},
      {"role": "assistant", "content": "",
       "tool_calls": [{"type": "function", "function": {"name": "add", "arguments": {"a": 2, "b": 2}}}]},
      {"role": "tool", "content": "4"},
      {"role": "assistant", "content": "4", "reasoning_content": "2 + 2 = 4"}
    ],
    "tools": [{"type": "function", "function": {"name": "add", "description": "Adds.",
               "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}],
    "bos_token": "<s>", "eos_token": "</s>", "enable_thinking": true, "add_generation_prompt": false
  })");
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::optional<ChatTemplate> chat;
  try {
    chat.emplace(std::string(fuzz::as_text(data, size)), "fuzz.jinja");
  } catch (const Error&) {
    return 0;
  }
  const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}};
  // One render of each kind: a hostile template may use its whole step
  // budget in every one, and the run's time limit covers them all.
  try {
    (void)chat->render(messages, true, "<s>", "</s>");
  } catch (const Error&) {
  }
  try {
    (void)chat->render(conversation());
  } catch (const Error&) {
  }
  try {
    if (chat->marks_generation()) (void)chat->render_marked(messages, "<s>", "</s>");
  } catch (const Error&) {
  }
  return 0;
}
