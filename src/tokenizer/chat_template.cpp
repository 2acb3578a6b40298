// ChatTemplate (meshrun/tokenizer/chat_template.hpp) on top of the Jinja interpreter,
// and the chat formatting every tokenizer kind shares.
#include "meshrun/tokenizer/chat_template.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "jinja.hpp"
#include "tokenizer_internal.hpp"

#include "meshrun/bounded_json.hpp"

namespace meshrun {

namespace {

nlohmann::ordered_json message_variables(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                         const std::string& bos_token, const std::string& eos_token) {
  nlohmann::ordered_json variables;
  variables["messages"] = nlohmann::ordered_json::array();
  for (const ChatMessage& message : messages) variables["messages"].push_back(chat_message_json(message));
  variables["add_generation_prompt"] = add_generation_prompt;
  variables["bos_token"] = bos_token;
  variables["eos_token"] = eos_token;
  return variables;
}

}  // namespace

nlohmann::ordered_json chat_message_json(const ChatMessage& message) {
  nlohmann::ordered_json entry = {{"role", message.role}, {"content", message.content}};
  if (message.fields)
    for (auto it = message.fields->begin(); it != message.fields->end(); ++it)
      if (it.key() != "role" && it.key() != "content") entry[it.key()] = it.value();
  return entry;
}

namespace {

std::string render_with(const jinja::Template& tmpl, const std::string& origin, const nlohmann::ordered_json& variables,
                        std::vector<std::pair<size_t, size_t>>* generation) {
  if (!variables.is_object()) throw TokenizerError(origin + ": chat template variables must be a JSON object");
  try {
    // Inside the try: a message past the string or list bounds fails here.
    jinja::Dict context;
    for (auto it = variables.begin(); it != variables.end(); ++it)
      context.set(it.key(), jinja::Value::from_json(it.value()));
    return jinja::render(tmpl, context, generation);
  } catch (const jinja::RenderError& error) {
    throw TokenizerError(origin + ": chat template " + error.message);
  }
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string origin) : origin_(std::move(origin)) {
  try {
    template_ = std::make_unique<jinja::Template>(jinja::parse(jinja::lex(source)));
  } catch (const jinja::RenderError& error) {
    throw TokenizerError(origin_ + ": chat template " + error.message);
  }
}

ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token) const {
  return render(message_variables(messages, add_generation_prompt, bos_token, eos_token));
}


std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  return render_with(*template_, origin_, variables, nullptr);
}

bool ChatTemplate::marks_generation() const { return jinja::marks_generation(*template_); }

MarkedChat ChatTemplate::render_marked(const nlohmann::ordered_json& variables) const {
  MarkedChat marked;
  marked.text = render_with(*template_, origin_, variables, &marked.generation);
  return marked;
}

MarkedChat ChatTemplate::render_marked(const std::vector<ChatMessage>& messages, const std::string& bos_token,
                                       const std::string& eos_token) const {
  return render_marked(message_variables(messages, false, bos_token, eos_token));
}

nlohmann::ordered_json read_conversation(const std::filesystem::path& file) {
  // A conversation is hand-written or exported; 64 MiB is far beyond any
  // context window and keeps a mistaken path (a device, a dataset) bounded.
  constexpr std::size_t kMaxBytes = std::size_t{64} << 20;
  const std::string where = file.string();
  std::error_code error;
  if (!std::filesystem::is_regular_file(file, error))
    throw TokenizerError(where + ": " + (std::filesystem::exists(file, error) ? "not a regular file" : "no such file"));
  const std::string text = tokenizer_detail::read_file(file, "conversation", kMaxBytes);
  nlohmann::ordered_json root;
  try {
    root = parse_bounded_json<nlohmann::ordered_json>(text);
  } catch (const nlohmann::json::parse_error& parse_error) {
    const size_t at = std::min<size_t>(parse_error.byte == 0 ? 0 : parse_error.byte - 1, text.size());
    const size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<long>(at), '\n'));
    const size_t line_start = text.rfind('\n', at == 0 ? 0 : at - 1);
    const size_t column = line_start == std::string::npos ? at + 1 : at - line_start;
    throw TokenizerError(where + ":" + std::to_string(line) + ":" + std::to_string(column) + ": not valid JSON");
  }
  if (root.is_array()) root = nlohmann::ordered_json{{"messages", std::move(root)}};
  if (!root.is_object())
    throw TokenizerError(where + ": a conversation is a JSON list of messages or an object with \"messages\"");
  if (!root.contains("messages") || !root["messages"].is_array())
    throw TokenizerError(where + ": the object has no \"messages\" list");
  if (root.contains("tools") && !root["tools"].is_array() && !root["tools"].is_null())
    throw TokenizerError(where + ": \"tools\" must be a list");
  const auto& messages = root["messages"];
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& message = messages[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
      throw TokenizerError(where + ": message " + std::to_string(i + 1) + " is not an object with a string \"role\"");
  }
  return root;
}

namespace tokenizer_detail {

ChatFormatter::ChatFormatter(const std::optional<std::string>& jinja_source, const std::string& origin)
    : origin_(origin) {
  if (jinja_source) template_ = std::make_shared<const ChatTemplate>(*jinja_source, origin);
}

void ChatFormatter::refuse_without_template() const {
  throw TokenizerError(origin_ + ": no chat template (tokenizer_config.json's chat_template or chat_template.jinja "
                                 "beside it), so a conversation cannot be rendered as the model expects; use a "
                                 "tokenizer that has one, or prompt/response data instead of messages");
}

std::string ChatFormatter::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token) const {
  if (!template_) refuse_without_template();
  return template_->render(with_extra(message_variables(messages, add_generation_prompt, bos_token, eos_token)));
}

void ChatFormatter::set_variables(const nlohmann::ordered_json& variables) {
  if (!variables.is_object()) throw TokenizerError("chat template variables must be a JSON object");
  extra_ = variables;
}

nlohmann::ordered_json ChatFormatter::with_extra(nlohmann::ordered_json variables) const {
  nlohmann::ordered_json merged = extra_;
  for (auto it = variables.begin(); it != variables.end(); ++it) merged[it.key()] = std::move(it.value());
  return merged;
}

std::optional<MarkedChat> ChatFormatter::apply_marked(const std::vector<ChatMessage>& messages,
                                                      const std::string& bos_token,
                                                      const std::string& eos_token) const {
  if (!template_ || !template_->marks_generation()) return std::nullopt;
  return template_->render_marked(with_extra(message_variables(messages, false, bos_token, eos_token)));
}

std::string ChatFormatter::render(const nlohmann::ordered_json& conversation, bool add_generation_prompt,
                                  const std::string& bos_token, const std::string& eos_token) const {
  if (!conversation.is_object() || !conversation.contains("messages") || !conversation["messages"].is_array())
    throw TokenizerError("a conversation is a JSON object with a \"messages\" list");
  if (!template_) refuse_without_template();
  // transformers renders with the special tokens first, then the caller's
  // keyword arguments over them, and add_generation_prompt last.
  nlohmann::ordered_json variables = extra_;
  if (!bos_token.empty()) variables["bos_token"] = bos_token;
  if (!eos_token.empty()) variables["eos_token"] = eos_token;
  for (auto it = conversation.begin(); it != conversation.end(); ++it) variables[it.key()] = it.value();
  variables["add_generation_prompt"] = add_generation_prompt;
  return template_->render(variables);
}

std::string builtin_chat_format(const nlohmann::ordered_json& conversation, bool add_generation_prompt) {
  std::vector<ChatMessage> messages;
  const auto& list = conversation.at("messages");
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& message = list[i];
    const auto role = message.is_object() ? message.find("role") : message.end();
    const auto content = message.is_object() ? message.find("content") : message.end();
    if (!message.is_object() || role == message.end() || !role->is_string() || content == message.end() ||
        !content->is_string())
      throw TokenizerError("message " + std::to_string(i + 1) +
                           ": the built-in chat format needs a string role and a string content "
                           "(a model directory's chat template can read more)");
    messages.push_back({role->get<std::string>(), content->get<std::string>()});
  }
  return builtin_chat_format(messages, add_generation_prompt);
}

std::string builtin_chat_format(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string text;
  for (const ChatMessage& message : messages) text += "<|" + message.role + "|>\n" + message.content + "\n";
  if (add_generation_prompt) text += "<|assistant|>\n";
  return text;
}

}  // namespace tokenizer_detail
}  // namespace meshrun
