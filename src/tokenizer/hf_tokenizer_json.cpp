// Reads a Hugging Face tokenizer.json into the parts of a byte-level BPE
// tokenizer, checking what it relies on and naming the file in every error.
#include <nlohmann/json.hpp>

#include "byte_level.hpp"
#include "hf_bpe_tokenizer.hpp"
#include "meshrun/bounded_json.hpp"

namespace meshrun::tokenizer_detail {
namespace {

using json = nlohmann::json;

const json& section(const json& root, const char* key) {
  static const json null_value;
  auto it = root.find(key);
  return it == root.end() ? null_value : *it;
}

std::string type_of(const json& config) {
  return config.is_object() && config.contains("type") && config["type"].is_string() ? config["type"].get<std::string>()
                                                                                       : std::string();
}

void check_decoder(const json& decoder, const std::string& origin) {
  if (type_of(decoder) == "ByteLevel") return;
  throw UnsupportedTokenizerJson(origin + ": decoder \"" + (decoder.is_null() ? "null" : type_of(decoder)) +
                                 "\" is not supported (only byte-level BPE: decoder ByteLevel)");
}

std::vector<std::pair<std::string, std::string>> read_merges(const json& merges, const std::string& origin) {
  std::vector<std::pair<std::string, std::string>> out;
  if (merges.is_null()) return out;
  if (!merges.is_array()) throw TokenizerError(origin + ": model.merges is not an array");
  out.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& merge = merges[i];
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        throw TokenizerError(origin + ": merge " + std::to_string(i) + " (\"" + text +
                             "\") is not two tokens separated by one space");
      out.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      out.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      throw TokenizerError(origin + ": merge " + std::to_string(i) + " is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }
  return out;
}

std::vector<AddedToken> read_added_tokens(const json& added, const std::string& origin) {
  std::vector<AddedToken> out;
  if (added.is_null()) return out;
  if (!added.is_array()) throw TokenizerError(origin + ": added_tokens is not an array");
  for (const json& entry : added) {
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer() || !entry.contains("content") ||
        !entry["content"].is_string())
      throw TokenizerError(origin + ": an added token without an integer \"id\" and a string \"content\": " +
                           json_excerpt(entry));
    AddedToken token;
    token.content = entry["content"].get<std::string>();
    const int64_t id = entry["id"].get<int64_t>();
    if (id < 0 || id > INT32_MAX) throw TokenizerError(origin + ": added token \"" + token.content + "\" has id " +
                                                       std::to_string(id));
    token.id = static_cast<int32_t>(id);
    // A flag of the wrong type is named, not reported as a bare JSON type error.
    auto flag = [&](const char* key, bool fallback) {
      if (!entry.contains(key) || entry[key].is_null()) return fallback;
      if (!entry[key].is_boolean())
        throw TokenizerError(origin + ": added token \"" + token.content + "\": \"" + key + "\" is " +
                             json_excerpt(entry[key]) + ", not true or false");
      return entry[key].get<bool>();
    };
    token.special = flag("special", false);
    token.lstrip = flag("lstrip", false);
    token.rstrip = flag("rstrip", false);
    token.normalized = flag("normalized", !token.special);
    token.single_word = flag("single_word", false);
    out.push_back(std::move(token));
  }
  return out;
}

// A post-processor's token id: the tokenizer indexes its vocabulary with
// it, so anything outside [0, vocabulary size) is refused here.
int32_t post_processor_id(const json& id, const std::string& origin, const std::string& what,
                          const std::vector<std::string>& tokens) {
  if (!id.is_number_integer() ||
      (id.is_number_unsigned() ? id.get<uint64_t>() >= tokens.size()
                               : id.get<int64_t>() < 0 || id.get<int64_t>() >= static_cast<int64_t>(tokens.size())))
    throw TokenizerError(origin + ": post_processor " + what + " has id " + json_excerpt(id) +
                         ", which is not in the vocabulary");
  return static_cast<int32_t>(id.get<int64_t>());
}

// The ids the post-processor puts before and after a single sequence.
void read_post_processor(const json& config, const std::string& origin, const std::vector<std::string>& tokens,
                         std::vector<int32_t>& prefix, std::vector<int32_t>& suffix) {
  if (config.is_null()) return;
  const std::string type = type_of(config);
  auto id_of_pair = [&](const json& pair, const char* key) {
    if (!pair.is_array() || pair.size() != 2 || !pair[1].is_number_integer())
      throw TokenizerError(origin + ": post_processor." + key + " is not [token, id]");
    return post_processor_id(pair[1], origin, std::string(key), tokens);
  };
  if (type == "Sequence") {
    for (const json& step : section(config, "processors")) read_post_processor(step, origin, tokens, prefix, suffix);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets.
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    prefix.push_back(id_of_pair(section(config, "cls"), "cls"));
    suffix.insert(suffix.begin(), id_of_pair(section(config, "sep"), "sep"));
  } else if (type == "TemplateProcessing") {
    const json& single = section(config, "single");
    const json& special_tokens = section(config, "special_tokens");
    if (!single.is_array()) throw TokenizerError(origin + ": post_processor.single is not an array");
    bool after_sequence = false;
    std::vector<int32_t> before, after;
    for (const json& piece : single) {
      if (piece.contains("Sequence")) {
        after_sequence = true;
        continue;
      }
      const json& special = section(piece, "SpecialToken");
      const json& name = section(special, "id");
      if (!name.is_string()) throw TokenizerError(origin + ": post_processor.single has an item " + json_excerpt(piece) +
                                                  " that is neither Sequence nor SpecialToken");
      const json& entry = section(special_tokens, name.get<std::string>().c_str());
      const json& ids = section(entry, "ids");
      if (!ids.is_array())
        throw TokenizerError(origin + ": post_processor.special_tokens has no ids for \"" + name.get<std::string>() +
                             "\"");
      for (const json& id : ids)
        (after_sequence ? after : before)
            .push_back(post_processor_id(id, origin, "special token \"" + name.get<std::string>() + "\"", tokens));
    }
    prefix.insert(prefix.end(), before.begin(), before.end());
    suffix.insert(suffix.begin(), after.begin(), after.end());
  } else {
    throw TokenizerError(origin + ": post_processor \"" + type + "\" is not supported");
  }
}

std::optional<int32_t> id_of(const HfBpeParts& parts, const std::string& token) {
  for (size_t id = 0; id < parts.tokens.size(); ++id)
    if (parts.known[id] && parts.tokens[id] == token) return static_cast<int32_t>(id);
  return std::nullopt;
}

// bos/eos/pad: the config's, else what the file shows.
void choose_special_ids(HfBpeParts& parts, const TokenizerConfig& config) {
  auto resolve = [&](const std::optional<std::string>& token, const char* what) -> std::optional<int32_t> {
    if (!token) return std::nullopt;
    auto id = id_of(parts, *token);
    if (!id)
      throw TokenizerError(config.path + ": " + what + " \"" + *token + "\" is not a token of " + parts.origin);
    return id;
  };
  parts.bos = resolve(config.bos_token, "bos_token");
  parts.eos = resolve(config.eos_token, "eos_token");
  parts.pad = resolve(config.pad_token, "pad_token");
  if (!config.bos_token && !parts.prefix.empty()) parts.bos = parts.prefix.front();
  if (!config.eos_token)
    for (const char* name : {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"})
      if ((parts.eos = id_of(parts, name))) break;
  if (parts.bos) parts.bos_token = parts.tokens[static_cast<size_t>(*parts.bos)];
  if (parts.eos) parts.eos_token = parts.tokens[static_cast<size_t>(*parts.eos)];
}

std::unique_ptr<Tokenizer> load_parts(const std::filesystem::path& path, const TokenizerConfig& config,
                                      const std::string& origin) {
  HfBpeParts parts;
  parts.origin = origin;
  json root;
  try {
    root = parse_bounded_json(read_file(path, "tokenizer.json", kMaxTokenizerJsonBytes));
  } catch (const json::parse_error& error) {
    throw TokenizerError(origin + ": not valid JSON: " + error.what());
  }
  if (!root.is_object()) throw TokenizerError(origin + ": not a JSON object");
  const json& model = section(root, "model");
  if (!model.is_object()) throw TokenizerError(origin + ": no \"model\" section");
  const std::string model_type = model.contains("type") ? type_of(model) : model.contains("merges") ? "BPE" : "";
  if (model_type != "BPE")
    throw TokenizerError(origin + ": model type \"" + model_type + "\" is not supported (only byte-level BPE)");
  parts.normalizer = Normalizer(section(root, "normalizer"), origin);
  check_decoder(section(root, "decoder"), origin);
  parts.pre_tokenizer = std::make_unique<PreTokenizer>(section(root, "pre_tokenizer"), origin);
  if (!parts.pre_tokenizer->byte_level())
    throw UnsupportedTokenizerJson(origin + ": the pre_tokenizer has no ByteLevel step (only byte-level BPE)");

  const json& vocab = section(model, "vocab");
  if (!vocab.is_object()) throw TokenizerError(origin + ": model.vocab is not an object");
  std::vector<AddedToken> added = read_added_tokens(section(root, "added_tokens"), origin);
  int64_t size = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 || it.value().get<int64_t>() > INT32_MAX)
      throw TokenizerError(origin + ": model.vocab[\"" + it.key() + "\"] is not a non-negative integer id");
    if (it.value().get<int64_t>() > kMaxTokenId)
      throw TokenizerError(origin + ": model.vocab[\"" + it.key() + "\"] has id " +
                           std::to_string(it.value().get<int64_t>()) + ", past the largest meshrun accepts (" +
                           std::to_string(kMaxTokenId) + ")");
    size = std::max(size, it.value().get<int64_t>() + 1);
  }
  for (const AddedToken& token : added) {
    if (token.id > kMaxTokenId)
      throw TokenizerError(origin + ": added token \"" + token.content + "\" has id " + std::to_string(token.id) +
                           ", past the largest meshrun accepts (" + std::to_string(kMaxTokenId) + ")");
    size = std::max<int64_t>(size, token.id + 1);
  }
  parts.tokens.assign(static_cast<size_t>(size), std::string());
  parts.known.assign(static_cast<size_t>(size), false);
  parts.special.assign(static_cast<size_t>(size), false);

  std::unordered_map<std::string, int32_t> by_text, by_bytes;
  by_text.reserve(vocab.size());
  by_bytes.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    parts.tokens[static_cast<size_t>(id)] = it.key();
    parts.known[static_cast<size_t>(id)] = true;
    by_text.emplace(it.key(), id);
    if (auto bytes = byte_level_to_bytes(it.key())) by_bytes.emplace(std::move(*bytes), id);
  }
  for (const AddedToken& token : added) {
    parts.tokens[static_cast<size_t>(token.id)] =
        matched_after_normalizing(token) ? parts.normalizer.apply(token.content) : token.content;
    parts.known[static_cast<size_t>(token.id)] = true;
    parts.special[static_cast<size_t>(token.id)] = token.special;
  }

  std::vector<std::pair<std::string, std::string>> merges;
  const auto text_merges = read_merges(section(model, "merges"), origin);
  merges.reserve(text_merges.size());
  for (size_t rank = 0; rank < text_merges.size(); ++rank) {
    const auto& [left, right] = text_merges[rank];
    for (const std::string& token : {left, right, left + right})
      if (!by_text.count(token))
        throw TokenizerError(origin + ": merge " + std::to_string(rank) + " (\"" + left + " " + right + "\") names \"" +
                             token + "\", which is not in model.vocab");
    auto left_bytes = byte_level_to_bytes(left), right_bytes = byte_level_to_bytes(right);
    // Tokens outside the byte alphabet can never be formed from bytes.
    if (left_bytes && right_bytes) merges.emplace_back(std::move(*left_bytes), std::move(*right_bytes));
  }
  std::optional<int32_t> unk_id;
  if (const json& unk = section(model, "unk_token"); unk.is_string()) {
    auto it = by_text.find(unk.get<std::string>());
    if (it == by_text.end())
      throw TokenizerError(origin + ": model.unk_token \"" + unk.get<std::string>() + "\" is not in model.vocab");
    unk_id = it->second;
  }
  if (const json& suffix = section(model, "end_of_word_suffix"); suffix.is_string() && !suffix.get<std::string>().empty())
    throw UnsupportedTokenizerJson(origin + ": model.end_of_word_suffix is not supported (only byte-level BPE)");
  if (const json& prefix = section(model, "continuing_subword_prefix");
      prefix.is_string() && !prefix.get<std::string>().empty())
    throw UnsupportedTokenizerJson(origin + ": model.continuing_subword_prefix is not supported (only byte-level BPE)");

  parts.model = std::make_unique<BpeModel>(std::move(by_bytes), merges, model.value("ignore_merges", false), unk_id,
                                           origin);
  parts.added_tokens = std::make_unique<AddedTokenMatcher>(std::move(added), parts.normalizer);
  read_post_processor(section(root, "post_processor"), origin, parts.tokens, parts.prefix, parts.suffix);
  choose_special_ids(parts, config);
  parts.chat = ChatFormatter(config.chat_template, config.chat_template_origin.empty() ? origin : config.chat_template_origin);
  return make_hf_bpe_tokenizer(std::move(parts));
}

}  // namespace

std::unique_ptr<Tokenizer> load_hf_tokenizer_json(const std::filesystem::path& path, const TokenizerConfig& config) {
  const std::string origin = "tokenizer.json at " + path.string();
  try {
    return load_parts(path, config, origin);
  } catch (const json::exception& error) {  // a field of the wrong type
    throw TokenizerError(origin + ": " + error.what());
  }
}

}  // namespace meshrun::tokenizer_detail
