// Pieces shared by the tokenizer kinds: reading files with errors that name
// them, a model directory's tokenizer_config.json, and the chat template a
// tokenizer renders with (the directory's Jinja one or the built-in one).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "meshrun/tokenizer/chat_template.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun::tokenizer_detail {

// A tokenizer.json that is valid but not byte-level BPE (e.g. Llama 2's
// Metaspace BPE): a model directory then falls back to tokenizer.model.
class UnsupportedTokenizerJson : public TokenizerError {
 public:
  using TokenizerError::TokenizerError;
};

// The largest tokenizer.json files are tens of MB (256k-entry vocabularies),
// their tokenizer_config.json files a few MB (added-token tables, chat
// templates); the bounds stop a path naming a device or the wrong file.
inline constexpr std::size_t kMaxTokenizerJsonBytes = std::size_t{512} << 20;
inline constexpr std::size_t kMaxTokenizerConfigBytes = std::size_t{64} << 20;
// Token ids index tables as large as the largest id: an id past 2^24 (the
// bound config.json's vocab_size has; the largest released vocabularies
// are ~256k) would make a few bytes of JSON allocate gigabytes.
inline constexpr int64_t kMaxTokenId = (int64_t{1} << 24) - 1;
// The file's text; a TokenizerError "WHAT at PATH: ..." when it cannot be
// read or is larger than max_bytes.
std::string read_file(const std::filesystem::path& path, const char* what, std::size_t max_bytes);

// What a model directory's tokenizer_config.json says (all optional).
struct TokenizerConfig {
  std::string path;  // empty when there is none
  std::optional<std::string> chat_template;
  std::string chat_template_origin;  // the file chat_template came from, for errors
  std::optional<std::string> bos_token, eos_token, pad_token;
  std::optional<bool> add_bos_token, add_eos_token;
};

// Reads tokenizer_config.json next to `tokenizer_file` when there is one.
TokenizerConfig read_tokenizer_config(const std::filesystem::path& directory);

// The chat template of a tokenizer: Jinja from the config, else built-in.
class ChatFormatter {
 public:
  ChatFormatter() = default;
  ChatFormatter(const std::optional<std::string>& jinja_source, const std::string& origin);
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                    const std::string& bos_token, const std::string& eos_token) const;
  // Tokenizer::render_chat_marked.
  std::optional<MarkedChat> apply_marked(const std::vector<ChatMessage>& messages, const std::string& bos_token,
                                         const std::string& eos_token) const;
  // Tokenizer::render_chat; an empty bos/eos token is left undefined, as
  // transformers leaves a token the tokenizer does not have.
  std::string render(const nlohmann::ordered_json& conversation, bool add_generation_prompt,
                     const std::string& bos_token, const std::string& eos_token) const;
  // Tokenizer::set_chat_template_variables.
  void set_variables(const nlohmann::ordered_json& variables);

 private:
  // The variables apply and apply_marked render with: the extra ones, then
  // the messages' over them.
  nlohmann::ordered_json with_extra(nlohmann::ordered_json variables) const;

  // A model directory's tokenizer without a chat template cannot render a
  // conversation: transformers refuses ("tokenizer.chat_template is not
  // set"), and the built-in format would train on markers the model never
  // saw. Throws TokenizerError naming where the template was looked for.
  [[noreturn]] void refuse_without_template() const;

  std::shared_ptr<const ChatTemplate> template_;
  std::string origin_;
  nlohmann::ordered_json extra_ = nlohmann::ordered_json::object();
};

// "<|role|>\ncontent\n" per message, "<|assistant|>\n" as generation prompt.
std::string builtin_chat_format(const std::vector<ChatMessage>& messages, bool add_generation_prompt);
// The same for a conversation object (Tokenizer::render_chat).
std::string builtin_chat_format(const nlohmann::ordered_json& conversation, bool add_generation_prompt);

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::filesystem::path& path, const TokenizerConfig& config);
std::unique_ptr<Tokenizer> load_sentencepiece_model(const std::filesystem::path& path, const TokenizerConfig& config);

}  // namespace meshrun::tokenizer_detail
