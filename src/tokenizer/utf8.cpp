#include "utf8.hpp"

namespace meshrun::tokenizer_detail {
namespace {

unsigned char byte_at(std::string_view text, size_t pos) { return static_cast<unsigned char>(text[pos]); }

// Length of the longest prefix at `pos` that could still start a valid
// sequence (the "maximal subpart" replaced by one U+FFFD), at least 1.
size_t maximal_invalid_prefix(std::string_view text, size_t pos) {
  const unsigned char lead = byte_at(text, pos);
  size_t expected = 0;
  unsigned char low = 0x80, high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) expected = 2;
  else if (lead >= 0xE0 && lead <= 0xEF) {
    expected = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    expected = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 1;
  }
  size_t length = 1;
  for (; length < expected && pos + length < text.size(); ++length) {
    const unsigned char byte = byte_at(text, pos + length);
    const unsigned char min = length == 1 ? low : 0x80, max = length == 1 ? high : 0xBF;
    if (byte < min || byte > max) break;
  }
  return length;
}

}  // namespace

size_t utf8_sequence_length(std::string_view text, size_t pos) {
  if (pos >= text.size()) return 0;
  const unsigned char lead = byte_at(text, pos);
  if (lead < 0x80) return 1;
  const size_t length = maximal_invalid_prefix(text, pos);
  const size_t expected = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  return length == expected && lead >= 0xC2 && lead <= 0xF4 ? length : 0;
}

size_t first_invalid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    if (byte_at(text, pos) < 0x80) {
      ++pos;
      continue;
    }
    const size_t length = utf8_sequence_length(text, pos);
    if (length == 0) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

char32_t decode_utf8_at(std::string_view text, size_t pos, size_t length) {
  const unsigned char lead = byte_at(text, pos);
  if (length == 1) return lead;
  char32_t code_point = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) code_point = (code_point << 6) | (byte_at(text, pos + i) & 0x3F);
  return code_point;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::u32string to_code_points(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t length = utf8_sequence_length(text, pos);
    if (length == 0) {
      out += U'\uFFFD';
      pos += maximal_invalid_prefix(text, pos);
    } else {
      out += decode_utf8_at(text, pos, length);
      pos += length;
    }
  }
  return out;
}

std::string from_code_points(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) append_utf8(out, c);
  return out;
}

bool is_unicode_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string utf8_lossy(std::string_view bytes) {
  if (first_invalid_utf8(bytes) == std::string_view::npos) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 8);
  for (size_t pos = 0; pos < bytes.size();) {
    const size_t length = utf8_sequence_length(bytes, pos);
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      pos += maximal_invalid_prefix(bytes, pos);
    } else {
      out.append(bytes.substr(pos, length));
      pos += length;
    }
  }
  return out;
}

}  // namespace meshrun::tokenizer_detail
