// JSON that came from a user's file or line, parsed and quoted with bounds.
//
// nlohmann's parser and destructor are iterative, but copying, dumping,
// comparing and converting a value recurse once per level of nesting, so a
// few hundred kilobytes of brackets in a config.json, a safetensors header or
// a data line would overflow the stack wherever the value went next. Every
// parse of file content goes through parse_bounded_json, which refuses values
// nested deeper than kMaxJsonDepth (far more than any file meshrun reads
// needs: a tokenizer.json nests about six levels, a conversation with tool
// calls about eight) before they are built.
//
// Memory is bounded the same way. Every array, object and string (object
// keys included) of a parsed value is its own heap allocation of some 60 to
// 100 bytes, while its text can be two bytes ("{}", ""): a 60 MB line of
// [{},{},...] parsed into 2 GB. parse_bounded_json therefore also refuses,
// before building anything, text holding more than a caller's number of
// them: kMaxJsonAllocatedValues by default, 8 Mi, about 800 MB at most
// whatever the text, and four times what the largest real files need (a
// tokenizer.json of a 262k vocabulary with its merges as pairs: about 1.8 M;
// a safetensors header: 8 per tensor, 800 k for 100,000 tensors). Readers of
// many small documents pass a smaller bound (JSONL lines: jsonl_reader.hpp).
// Numbers, booleans and null are stored inline (16 bytes each), so a list
// of a million token ids costs one allocation, its array.
//
// Messages that quote a value from a file use json_excerpt, which bounds
// what they print, and integers are read with json_integer, which never
// truncates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace meshrun {

inline constexpr int kMaxJsonDepth = 128;
inline constexpr std::size_t kMaxJsonAllocatedValues = std::size_t{1} << 23;

struct JsonShape {
  int depth = 0;                     // the deepest nesting of arrays and objects
  std::size_t allocated_values = 0;  // arrays, objects and strings, keys included
};

// The shape of `text`, outside strings, stopping early once the depth passes
// `max_depth` or the count passes `max_allocated_values`. A scan, not a
// parse: nlohmann's only hook into its parser that sees depth (the callback
// parser) searches the parent for discarded children at the end of every
// object, so a header of n objects took n² steps. For JSON text the counts
// are exact; for other text the parse that follows fails anyway.
inline JsonShape json_shape(std::string_view text, int max_depth, std::size_t max_allocated_values) {
  JsonShape shape;
  int depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped character cannot end the string
      else if (c == '"') in_string = false;
    } else if (c == '"' || c == '[' || c == '{') {
      in_string = c == '"';
      if (++shape.allocated_values > max_allocated_values) return shape;
      if (!in_string && ++depth > shape.depth && (shape.depth = depth) > max_depth) return shape;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return shape;
}

// Parses `text` like Json::parse. With allow_exceptions, text that is not
// JSON throws Json::parse_error as parse does, and so does a value nested
// deeper than max_depth or holding more than max_allocated_values arrays,
// objects and strings (the message says which); without, all give a
// discarded value. A value past either bound is refused before anything is
// built.
template <class Json = nlohmann::json>
Json parse_bounded_json(std::string_view text, bool allow_exceptions = true, int max_depth = kMaxJsonDepth,
                        std::size_t max_allocated_values = kMaxJsonAllocatedValues) {
  const JsonShape shape = json_shape(text, max_depth, max_allocated_values);
  const bool too_deep = shape.depth > max_depth;
  if (too_deep || shape.allocated_values > max_allocated_values) {
    if (!allow_exceptions) return Json(Json::value_t::discarded);
    throw Json::parse_error::create(
        101, 0,
        too_deep ? "nested deeper than " + std::to_string(max_depth) + " levels of arrays and objects"
                 : "holds more than " + std::to_string(max_allocated_values) +
                       " arrays, objects and strings (each a separate allocation once parsed)",
        nullptr);
  }
  return Json::parse(text.begin(), text.end(), nullptr, allow_exceptions);
}

// `value` as an Int when it is an integer within Int's range, else nothing:
// nlohmann's get<Int>() converts any number, truncating 4.5 to 4 and 2^32 + 4
// to 4, and a float past Int's range is undefined behaviour.
template <typename Int, class Json>
std::optional<Int> json_integer(const Json& value) {
  if (value.is_number_unsigned()) {
    if (value.template get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<Int>::max()))
      return static_cast<Int>(value.template get<std::uint64_t>());
  } else if (value.is_number_integer()) {
    const std::int64_t n = value.template get<std::int64_t>();
    if (n >= static_cast<std::int64_t>(std::numeric_limits<Int>::min()) &&
        (n < 0 || static_cast<std::uint64_t>(n) <= static_cast<std::uint64_t>(std::numeric_limits<Int>::max())))
      return static_cast<Int>(n);
  }
  return std::nullopt;
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
