// GPT-2's byte-level alphabet: each of the 256 bytes is shown as a printable
// Unicode character ('Ġ' for space), so byte-level BPE vocabularies are
// strings of those characters. Tokens are converted back to raw bytes once,
// at load time, and encoding then works on bytes directly.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace meshrun::tokenizer_detail {

// The character standing for `byte`.
char32_t byte_level_char(unsigned char byte);

// The raw bytes a byte-level token stands for, or nullopt when one of its
// characters is not in the alphabet.
std::optional<std::string> byte_level_to_bytes(std::string_view token);

// What Hugging Face's ByteLevel decoder makes of one token: its bytes when
// every character is in the alphabet, else the token's own UTF-8.
std::string byte_level_decode_token(std::string_view token);

}  // namespace meshrun::tokenizer_detail
