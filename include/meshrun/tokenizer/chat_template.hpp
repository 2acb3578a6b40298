// Chat templates: the Jinja templates of tokenizer_config.json that turn a
// list of messages into the text a chat model was trained on.
//
// A built-in interpreter of the subset of Jinja that chat templates use:
// {{ }}, {% if/elif/else %}, {% for %} (with loop.index0/index/first/last/
// length, `if` filters, `else`, break/continue), {% set %} (also ns.attr and
// set blocks), namespace(), macros, filters (trim, length, tojson, string,
// upper, lower, default, join, first, last, replace, ...), tests (`is
// defined`, none, string, ...), `in`, `~`, arithmetic, comparisons, and/or/
// not, conditional expressions, slicing, dict/attribute access, the string
// methods startswith/endswith/strip/split/..., raise_exception(), and
// whitespace control ({%- -%}). Rendering follows Hugging Face's
// apply_chat_template environment: trim_blocks and lstrip_blocks on, values
// printed the way Python prints them, tojson as json.dumps(ensure_ascii=False).
//
// Invariants: a template that parses renders deterministically; anything it
// cannot do (syntax error, unknown filter, raise_exception) throws
// TokenizerError naming `origin` and the template line.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun {

namespace jinja {
struct Template;
}

class ChatTemplate {
 public:
  // Parses `source`; throws TokenizerError("ORIGIN: chat template line N: ...").
  ChatTemplate(const std::string& source, std::string origin);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;

  // Renders with `messages` (role and content of each), add_generation_prompt,
  // bos_token and eos_token.
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token) const;
  // Renders with any variables (a JSON object: messages with tool calls,
  // tools, custom flags).
  std::string render(const nlohmann::ordered_json& variables) const;
  // Whether the template marks assistant text with {% generation %}.
  bool marks_generation() const;
  // render(variables) with the byte ranges {% generation %} blocks wrote.
  MarkedChat render_marked(const nlohmann::ordered_json& variables) const;
  // render(messages, false, ...) with those ranges.
  MarkedChat render_marked(const std::vector<ChatMessage>& messages, const std::string& bos_token,
                           const std::string& eos_token) const;

 private:
  std::unique_ptr<jinja::Template> template_;
  std::string origin_;
};

// One conversation from a JSON file, as `meshrun tokenize --chat` takes it:
// a list of messages, or an object with "messages" (and optionally "tools"
// and other template variables). Returns the object form. Each message must
// be an object with a string "role". The file must be a regular file of at
// most 64 MiB. Throws TokenizerError naming the file (and the line and
// column of a JSON syntax error).
nlohmann::ordered_json read_conversation(const std::filesystem::path& file);

}  // namespace meshrun
