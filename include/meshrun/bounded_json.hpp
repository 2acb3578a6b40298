// JSON that came from a user's file or line, parsed and quoted with bounds.
//
// nlohmann's parser and destructor are iterative, but copying, dumping,
// comparing and converting a value recurse once per level of nesting, so a
// few hundred kilobytes of brackets in a config.json, a safetensors header or
// a data line would overflow the stack wherever the value went next. Every
// parse of file content goes through parse_bounded_json, which refuses values
// nested deeper than kMaxJsonDepth (far more than any file meshrun reads
// needs: a tokenizer.json nests about six levels, a conversation with tool
// calls about eight) before they are built. Messages that quote a value from
// a file use json_excerpt, which bounds what they print.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace meshrun {

inline constexpr int kMaxJsonDepth = 128;

// Parses `text` like Json::parse. With allow_exceptions, text that is not
// JSON throws Json::parse_error as parse does, and so does a value nested
// deeper than max_depth (the message says so); without, both give a
// discarded value. Containers past the limit are skipped while parsing
// (never built), so the refusal costs no more memory than the text.
template <class Json = nlohmann::json>
Json parse_bounded_json(std::string_view text, bool allow_exceptions = true, int max_depth = kMaxJsonDepth) {
  bool too_deep = false;
  const typename Json::parser_callback_t limit = [&](int depth, typename Json::parse_event_t event, Json&) {
    const bool opens = event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
    // depth counts the containers already open around this one.
    if (opens && depth >= max_depth) too_deep = true;
    return !too_deep;
  };
  Json value = Json::parse(text.begin(), text.end(), limit, allow_exceptions);
  if (!too_deep) return value;
  if (!allow_exceptions) return Json(Json::value_t::discarded);
  throw Json::parse_error::create(
      101, 0, "nested deeper than " + std::to_string(max_depth) + " levels of arrays and objects", nullptr);
}

// A value from a file as messages quote it: its JSON text when that is at
// most max_chars long, else its first max_chars characters and "...".
template <class Json>
std::string json_excerpt(const Json& value, std::size_t max_chars = 80) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > max_chars) {
    text.resize(max_chars);
    text += "...";
  }
  return text;
}

}  // namespace meshrun
