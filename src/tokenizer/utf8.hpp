// UTF-8 helpers shared by the tokenizers and the chat-template interpreter:
// validation, code-point iteration and Rust-style lossy decoding (each
// maximal invalid subsequence becomes U+FFFD), which is what Hugging Face's
// byte-level decoder produces for byte sequences that are not UTF-8.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshrun::tokenizer_detail {

// Length of the valid UTF-8 sequence starting at text[pos], or 0 when the
// bytes there are not one (truncated, overlong, surrogate, > U+10FFFF).
size_t utf8_sequence_length(std::string_view text, size_t pos);

// Byte offset of the first invalid sequence, or npos when `text` is valid.
size_t first_invalid_utf8(std::string_view text);

// Decodes the valid sequence at text[pos] (length from utf8_sequence_length).
char32_t decode_utf8_at(std::string_view text, size_t pos, size_t length);

void append_utf8(std::string& out, char32_t code_point);

// Code points of valid UTF-8 `text` (invalid bytes become U+FFFD).
std::u32string to_code_points(std::string_view text);
std::string from_code_points(std::u32string_view code_points);

// Unicode's White_Space property (what Rust's char::is_whitespace tests):
// a closed list the Unicode standard keeps stable, cheaper than a lookup.
bool is_unicode_whitespace(char32_t c);

// Bytes → text with invalid sequences replaced like Rust's from_utf8_lossy.
std::string utf8_lossy(std::string_view bytes);

}  // namespace meshrun::tokenizer_detail
