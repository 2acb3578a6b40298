// ChatTemplate (meshrun/tokenizer/chat_template.hpp) on top of the Jinja interpreter,
// and the chat formatting every tokenizer kind shares.
#include "meshrun/tokenizer/chat_template.hpp"

#include <nlohmann/json.hpp>

#include "jinja.hpp"
#include "tokenizer_internal.hpp"

namespace meshrun {

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
  nlohmann::ordered_json variables;
  variables["messages"] = nlohmann::ordered_json::array();
  for (const ChatMessage& message : messages)
    variables["messages"].push_back({{"role", message.role}, {"content", message.content}});
  variables["add_generation_prompt"] = add_generation_prompt;
  variables["bos_token"] = bos_token;
  variables["eos_token"] = eos_token;
  return render(variables);
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object()) throw TokenizerError(origin_ + ": chat template variables must be a JSON object");
  jinja::Dict context;
  for (auto it = variables.begin(); it != variables.end(); ++it)
    context.set(it.key(), jinja::Value::from_json(it.value()));
  try {
    return jinja::render(*template_, context);
  } catch (const jinja::RenderError& error) {
    throw TokenizerError(origin_ + ": chat template " + error.message);
  }
}

namespace tokenizer_detail {

ChatFormatter::ChatFormatter(const std::optional<std::string>& jinja_source, const std::string& origin) {
  if (jinja_source) template_ = std::make_shared<const ChatTemplate>(*jinja_source, origin);
}

std::string ChatFormatter::apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const std::string& bos_token, const std::string& eos_token) const {
  if (!template_) return builtin_chat_format(messages, add_generation_prompt);
  return template_->render(messages, add_generation_prompt, bos_token, eos_token);
}

std::string builtin_chat_format(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  std::string text;
  for (const ChatMessage& message : messages) text += "<|" + message.role + "|>\n" + message.content + "\n";
  if (add_generation_prompt) text += "<|assistant|>\n";
  return text;
}

}  // namespace tokenizer_detail
}  // namespace meshrun
