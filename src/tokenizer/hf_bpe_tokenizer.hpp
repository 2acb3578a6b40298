// A Hugging Face tokenizer.json byte-level BPE tokenizer, assembled by
// hf_tokenizer_json.cpp from the file's sections.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "added_tokens.hpp"
#include "bpe_model.hpp"
#include "normalizer.hpp"
#include "pretokenizer.hpp"
#include "tokenizer_internal.hpp"

namespace meshrun::tokenizer_detail {

struct HfBpeParts {
  std::string origin;  // "tokenizer.json at PATH"
  Normalizer normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<AddedTokenMatcher> added_tokens;
  // Every id's token as written in the file ("" for ids nobody has).
  std::vector<std::string> tokens;
  std::vector<bool> special;  // added tokens marked special
  std::vector<bool> known;
  std::vector<int32_t> prefix, suffix;  // what the post-processor adds
  std::optional<int32_t> bos, eos, pad;
  std::string bos_token, eos_token;
  ChatFormatter chat;
};

std::unique_ptr<Tokenizer> make_hf_bpe_tokenizer(HfBpeParts parts);

}  // namespace meshrun::tokenizer_detail
