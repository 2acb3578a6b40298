#include "byte_level.hpp"

#include <array>

#include "utf8.hpp"

namespace meshrun::tokenizer_detail {
namespace {

struct Alphabet {
  std::array<char32_t, 256> char_of_byte{};
  std::array<int, 324> byte_of_char{};  // every mapped character is < 324

  Alphabet() {
    byte_of_char.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const char32_t c = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(next_extra++);
      char_of_byte[static_cast<size_t>(b)] = c;
      byte_of_char[c] = b;
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet instance;
  return instance;
}

}  // namespace

char32_t byte_level_char(unsigned char byte) { return alphabet().char_of_byte[byte]; }

std::optional<std::string> byte_level_to_bytes(std::string_view token) {
  const Alphabet& a = alphabet();
  std::string bytes;
  bytes.reserve(token.size());
  for (size_t pos = 0; pos < token.size();) {
    const size_t length = utf8_sequence_length(token, pos);
    if (length == 0) return std::nullopt;
    const char32_t c = decode_utf8_at(token, pos, length);
    if (c >= a.byte_of_char.size() || a.byte_of_char[c] < 0) return std::nullopt;
    bytes += static_cast<char>(a.byte_of_char[c]);
    pos += length;
  }
  return bytes;
}

std::string byte_level_decode_token(std::string_view token) {
  auto bytes = byte_level_to_bytes(token);
  return bytes ? *bytes : std::string(token);
}

}  // namespace meshrun::tokenizer_detail
