// Tokenizer: text ↔ token ids, the way the model was trained to see them.
//
// Three kinds, one interface:
// - byte-level ("builtin:bytes", and the tokenizer of every builtin: model
//   preset): ids 0..255 are the bytes; then <|bos|> = 256, <|eos|> = 257,
//   <|pad|> = 258 (vocab_size() = 259).
// - SentencePiece: a model directory's tokenizer.model, through
//   libsentencepiece.
// - Hugging Face tokenizer.json byte-level BPE (Llama 3, Qwen2 style): the
//   pre-tokenizer's split regex, ignore_merges, added tokens (special ones
//   matched inside text before pre-tokenization), the post-processor's
//   special tokens, byte-level decoding, the NFC normalizer (Qwen2). A
//   tokenizer.json that is not byte-level BPE (Llama 2's Metaspace one)
//   gives way to the directory's tokenizer.model.
// A model directory's tokenizer_config.json supplies the chat template
// (Jinja, rendered by a built-in interpreter of the subset chat templates
// use) and the bos/eos/pad tokens when tokenizer.json does not say.
//
// Invariants: encode(text, false) then decode(ids, false) gives back `text`
// for any valid UTF-8 (byte-level and BPE kinds; with an NFC normalizer, the
// NFC form of `text`). Ids are always in
// [0, vocab_size()). Errors (unreadable or malformed files, an unknown id in
// decode, a template error) throw TokenizerError naming the file and what is
// wrong.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "meshrun/error.hpp"

namespace meshrun {

class TokenizerError : public KindError<ErrorKind::data> {
 public:
  using KindError::KindError;
};

// A conversation rendered by a chat template that marks assistant text with
// Hugging Face's {% generation %} blocks: `generation` holds the [begin,
// end) byte ranges of `text` those blocks wrote, in order.
struct MarkedChat {
  std::string text;
  std::vector<std::pair<std::size_t, std::size_t>> generation;
};

struct ChatMessage {
  std::string role;  // system | user | assistant | tool ...
  std::string content;
  // The message's other keys (tool_calls, name, reasoning_content,
  // tool_call_id, ...) as a JSON object: a chat template reads them, as
  // transformers passes it the whole message. Null: none. The built-in
  // format renders role and content only.
  std::shared_ptr<const nlohmann::ordered_json> fields = nullptr;
};

// The message as a chat template reads it: {"role", "content", then fields'}.
nlohmann::ordered_json chat_message_json(const ChatMessage& message);

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // With add_special, the special tokens the tokenizer's own post-processor
  // adds (e.g. Llama 3's <|begin_of_text|>) are included.
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special = true) const = 0;
  // skip_special leaves special tokens out of the text.
  virtual std::string decode(std::span<const int32_t> ids, bool skip_special = false) const = 0;
  virtual int32_t vocab_size() const = 0;

  virtual std::optional<int32_t> bos_id() const = 0;
  virtual std::optional<int32_t> eos_id() const = 0;
  // The pad id: the tokenizer's own, else eos.
  virtual std::optional<int32_t> pad_id() const = 0;
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;

  // Renders messages with the chat template (the model directory's; the
  // byte-level presets have a plain built-in one, "<|role|>\ncontent\n" per
  // message, "<|assistant|>\n" as generation prompt; a model directory's
  // tokenizer without a template throws, as transformers does). The result is text
  // to encode with add_special = false (the template writes its own
  // special tokens).
  virtual std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                          bool add_generation_prompt) const = 0;
  // Renders a whole conversation the way transformers' apply_chat_template
  // does: `conversation` is a JSON object with "messages" (each with a role
  // and whatever else the template reads: content, tool_calls,
  // reasoning_content, ...), optionally "tools", and any further template
  // variables (e.g. enable_thinking). bos_token and eos_token are the
  // tokenizer's (when it has them) unless the conversation sets them;
  // add_generation_prompt is the argument. The built-in format needs string
  // contents. Throws TokenizerError.
  virtual std::string render_chat(const nlohmann::ordered_json& conversation, bool add_generation_prompt) const = 0;
  // When the chat template has {% generation %} blocks: `messages` rendered
  // (no generation prompt) with where those blocks wrote. Otherwise nullopt
  // (the built-in format and templates without markers).
  virtual std::optional<MarkedChat> render_chat_marked(const std::vector<ChatMessage>&) const { return std::nullopt; }
  // Extra variables (a JSON object, e.g. {"enable_thinking": false}) that
  // apply_chat_template and render_chat_marked render with from now on, as
  // transformers' apply_chat_template keyword arguments: the names those
  // calls set themselves (messages, add_generation_prompt, bos_token,
  // eos_token) win. The built-in format has no variables and ignores them.
  virtual void set_chat_template_variables(const nlohmann::ordered_json& /*variables*/) {}
  // Where it came from: "builtin:bytes", "tokenizer.json at PATH", ...
  virtual std::string description() const = 0;
};

// `source`: a model directory (tokenizer.json preferred over
// tokenizer.model), a tokenizer file itself, "builtin:bytes", or a builtin:
// model preset name (byte-level). Throws TokenizerError.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& source);

// Why load_tokenizer(source) would not find a tokenizer, without reading
// one: an unknown builtin: name, a hub name not in the local cache, a path
// that does not exist, a directory with neither tokenizer.json nor
// tokenizer.model. Empty when it would find one (which may still be
// malformed). Lint's check, by the same resolution as the load.
std::string tokenizer_source_problem(const std::string& source);

std::unique_ptr<Tokenizer> make_byte_tokenizer();

}  // namespace meshrun
