// Feeds JSONL data files to the SFT, prompt and preference readers and
// tokenizes what they read with the byte tokenizer. Expected: a DataError
// naming file and line; finding: anything else (fuzz_support.hpp).
#include "fuzz_support.hpp"
#include "meshrun/data/dataset.hpp"
#include "meshrun/data/preference.hpp"
#include "meshrun/data/prompts.hpp"
#include "meshrun/error.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

using namespace meshrun;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<Tokenizer> tokenizer = make_byte_tokenizer();
  DataConfig config;
  config.path = fuzz::write_file(fuzz::scratch_dir() / "data.jsonl", fuzz::as_text(data, size));
  config.label_key = "label";
  config.max_len = 64;  // short enough that truncation and dropping happen
  try {
    (void)load_sft_dataset(config, *tokenizer);
  } catch (const Error&) {
  }
  config.loss_turns = LossTurns::last;
  try {
    (void)load_sft_dataset(config, *tokenizer);
  } catch (const Error&) {
  }
  try {
    (void)load_prompt_dataset(config, *tokenizer, /*max_prompt_len=*/32);
  } catch (const Error&) {
  }
  try {
    (void)load_preference_dataset(config, *tokenizer);
  } catch (const Error&) {
  }
  // Lint's reading: a prefix of the file.
  try {
    bool truncated = false;
    (void)read_sft_records(config, 3, DataReadLimit{.max_bytes = 100, .truncated = &truncated});
  } catch (const Error&) {
  }
  return 0;
}
