// `meshrun tokenize MODEL --text TEXT | --decode IDS | --chat FILE`: a
// model's tokenizer from the command line, to check what a recipe's data
// will look like.
// --text prints the ids as a JSON array (with the special tokens the
// tokenizer's post-processor adds, unless --no-special); --decode takes ids
// as a JSON array or a comma list and prints the text (--no-special leaves
// special tokens out); --chat renders one conversation with the chat
// template exactly as transformers' apply_chat_template would and prints the
// text (--render, then one newline) or its ids (encoded without added
// special tokens, as apply_chat_template(tokenize=True) does: the template
// writes its own).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "meshrun/bounded_json.hpp"
#include "meshrun/tokenizer/chat_template.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun::cli {
namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  const auto not_ids = [&] {
    return TokenizerError("--decode: \"" + text + "\" is not a JSON array or a comma-separated list of integer ids");
  };
  std::vector<int32_t> ids;
  const size_t first = text.find_first_not_of(" \t\n");
  if (first != std::string::npos && text[first] == '[') {
    nlohmann::json array;
    try {
      array = parse_bounded_json(text);
    } catch (const nlohmann::json::exception&) {
      throw not_ids();
    }
    if (!array.is_array()) throw not_ids();
    for (const auto& id : array) {
      if (!id.is_number_integer() || id.get<int64_t>() < INT32_MIN || id.get<int64_t>() > INT32_MAX) throw not_ids();
      ids.push_back(id.get<int32_t>());
    }
    return ids;
  }
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(pos, comma - pos);
    const size_t begin = item.find_first_not_of(" \t"), end = item.find_last_not_of(" \t");
    if (begin == std::string::npos) throw not_ids();
    const std::string number = item.substr(begin, end - begin + 1);
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(number, &used);
    } catch (const std::exception&) {
      throw not_ids();
    }
    if (used != number.size() || value < INT32_MIN || value > INT32_MAX) throw not_ids();
    ids.push_back(static_cast<int32_t>(value));
    pos = comma + 1;
  }
  return ids;
}

}  // namespace

int tokenize_command(const TokenizeOptions& options) {
  try {
    auto tokenizer = load_tokenizer(options.model);
    if (options.chat) {
      const auto conversation = read_conversation(*options.chat);
      std::string text;
      try {
        text = tokenizer->render_chat(conversation, options.generation_prompt);
      } catch (const TokenizerError& error) {
        throw TokenizerError(*options.chat + ": " + error.what());
      }
      if (options.render) {
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fputc('\n', stdout);
      } else {
        std::fputs((nlohmann::json(tokenizer->encode(text, false)).dump() + "\n").c_str(), stdout);
      }
    } else if (options.decode) {
      const std::string text = tokenizer->decode(parse_ids(*options.decode), options.no_special);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fputc('\n', stdout);
    } else {
      const auto ids = tokenizer->encode(options.text.value_or(""), !options.no_special);
      std::fputs((nlohmann::json(ids).dump() + "\n").c_str(), stdout);
    }
    return kOk;
  } catch (const TokenizerError& error) {
    std::fprintf(stderr, "meshrun tokenize: %s\n", error.what());
    return kFailed;
  }
}

}  // namespace meshrun::cli
