// Helpers shared by the data tests: a small byte-level Tokenizer of our own
// (independent of src/tokenizer/), with switches for the awkward cases, and
// a scratch folder for JSONL files written by the tests.
#pragma once

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/tokenizer/chat_template.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun::data_test {

// Bytes are ids 0..255; bos 256, eos 257, pad 258; merged pair 259.
class FakeTokenizer : public Tokenizer {
 public:
  bool add_bos = true;                     // encode(add_special) prepends bos
  bool has_eos = true;
  bool has_pad = true;
  std::string merge;                       // a two-byte string encoded as one id (259)
  std::string generation_prompt = "<|assistant|>\n";
  bool template_writes_eos = false;        // end each assistant turn with eos
  std::string fail_on;                     // encode throws TokenizerError on text containing this
  std::shared_ptr<const ChatTemplate> jinja;  // renders chats instead of the built-in format

  std::vector<int32_t> encode(std::string_view text, bool add_special = true) const override {
    if (!fail_on.empty() && text.find(fail_on) != std::string_view::npos) {
      throw TokenizerError("fake tokenizer refuses \"" + fail_on + "\"");
    }
    std::vector<int32_t> ids;
    if (add_special && add_bos) ids.push_back(256);
    for (std::size_t i = 0; i < text.size(); ++i) {
      if (merge.size() == 2 && text.substr(i, 2) == merge) {
        ids.push_back(259);
        ++i;
        continue;
      }
      if (template_writes_eos && text.substr(i, 5) == "<EOS>") {
        ids.push_back(257);
        i += 4;
        continue;
      }
      ids.push_back(static_cast<unsigned char>(text[i]));
    }
    return ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const override {
    std::string text;
    for (const int32_t id : ids) {
      if (id < 256) text += static_cast<char>(id);
      else if (id == 259) text += merge;
      else if (!skip_special) text += id == 256 ? "<bos>" : id == 257 ? "<eos>" : "<pad>";
    }
    return text;
  }
  int32_t vocab_size() const override { return 260; }
  std::optional<int32_t> bos_id() const override { return add_bos ? std::optional<int32_t>(256) : std::nullopt; }
  std::optional<int32_t> eos_id() const override { return has_eos ? std::optional<int32_t>(257) : std::nullopt; }
  std::optional<int32_t> pad_id() const override {
    if (has_pad) return 258;
    return eos_id();
  }
  std::optional<int32_t> token_to_id(std::string_view) const override { return std::nullopt; }
  std::string apply_chat_template(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const override {
    if (jinja) return jinja->render(messages, add_generation_prompt, "", "<EOS>");
    std::string text;
    for (const ChatMessage& message : messages) {
      text += "<|" + message.role + "|>\n" + message.content;
      if (template_writes_eos && message.role == "assistant") text += "<EOS>";
      text += "\n";
    }
    if (add_generation_prompt) text += generation_prompt;
    return text;
  }
  std::string render_chat(const nlohmann::ordered_json&, bool) const override {
    throw TokenizerError("the fake tokenizer renders message lists only");
  }
  std::optional<MarkedChat> render_chat_marked(const std::vector<ChatMessage>& messages) const override {
    if (!jinja || !jinja->marks_generation()) return std::nullopt;
    return jinja->render_marked(messages, "", "<EOS>");
  }
  std::string description() const override { return "fake byte tokenizer"; }
};

// The ids FakeTokenizer gives `text` without special tokens.
inline std::vector<int32_t> bytes_of(std::string_view text) {
  std::vector<int32_t> ids;
  for (const char c : text) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

inline std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class ScratchFolder {
 public:
  ScratchFolder() {
    static std::atomic<int> counter = 0;
    const auto stamp = std::chrono::steady_clock::now().time_since_epoch().count();
    root_ = std::filesystem::temp_directory_path() /
            ("meshrun-data-" + std::to_string(stamp) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(root_);
  }
  ~ScratchFolder() {
    std::error_code ignored;
    std::filesystem::remove_all(root_, ignored);
  }
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;

  const std::filesystem::path& root() const { return root_; }
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path path = root_ / name;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream(path, std::ios::binary) << text;
    return path.string();
  }

 private:
  std::filesystem::path root_;
};

inline DataConfig data_config(const std::string& path, int max_len = 2048, bool packing = false) {
  DataConfig config;
  config.path = path;
  config.max_len = max_len;
  config.packing = packing;
  return config;
}

}  // namespace meshrun::data_test
