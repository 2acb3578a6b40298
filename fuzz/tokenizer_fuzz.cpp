// Feeds a tokenizer.json, a NUL byte, then a text: load_tokenizer, encode
// (every id must lie in [0, vocab_size()), else a trap), decode. Expected: a
// TokenizerError; finding: anything else (fuzz_support.hpp).
#include <string>

#include "fuzz_support.hpp"
#include "meshrun/error.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

using namespace meshrun;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split(fuzz::as_text(data, size), std::string_view("\0", 1), 2);
  const std::string_view text = parts.size() > 1 ? parts[1] : std::string_view("Hello world, ça va? 123");
  const std::string path = fuzz::write_file(fuzz::scratch_dir() / "tokenizer.json", parts[0]);
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = load_tokenizer(path);
  } catch (const Error&) {
    return 0;
  }
  for (bool add_special : {false, true}) {
    try {
      const std::vector<int32_t> ids = tokenizer->encode(text, add_special);
      for (int32_t id : ids)
        if (id < 0 || id >= tokenizer->vocab_size()) __builtin_trap();
      (void)tokenizer->decode(ids, false);
      (void)tokenizer->decode(ids, true);
    } catch (const Error&) {
    }
  }
  try {
    (void)tokenizer->token_to_id(text);
    (void)tokenizer->apply_chat_template({{"user", std::string(text)}}, true);
  } catch (const Error&) {
  }
  return 0;
}
