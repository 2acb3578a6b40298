// SentencePiece tokenizer.model files, through the meshrun_sentencepiece
// module (sentencepiece_shim.cpp) opened with dlopen: libsentencepiece must
// never be linked into a process image that also has LibTorch (its protobuf
// code crashes at start-up), and RTLD_DEEPBIND keeps its symbols to itself.
//
// The module is found at MESHRUN_SENTENCEPIECE_MODULE, else where this build
// tree made it, else in the installed libdir.
#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "sentencepiece_module_path.hpp"
#include "sentencepiece_shim.h"
#include "tokenizer_internal.hpp"

namespace meshrun::tokenizer_detail {
namespace {

// The module's entry points, resolved once per process.
struct ShimApi {
  decltype(&meshrun_spm_abi_version) abi_version;
  decltype(&meshrun_spm_load) load;
  decltype(&meshrun_spm_close) close;
  decltype(&meshrun_spm_free) free;
  decltype(&meshrun_spm_encode) encode;
  decltype(&meshrun_spm_decode) decode;
  decltype(&meshrun_spm_vocab_size) vocab_size;
  decltype(&meshrun_spm_bos_id) bos_id;
  decltype(&meshrun_spm_eos_id) eos_id;
  decltype(&meshrun_spm_pad_id) pad_id;
  decltype(&meshrun_spm_unk_id) unk_id;
  decltype(&meshrun_spm_piece_to_id) piece_to_id;
  decltype(&meshrun_spm_id_to_piece) id_to_piece;
  decltype(&meshrun_spm_is_control) is_control;
};

std::vector<std::string> module_candidates() {
  if (const char* path = std::getenv("MESHRUN_SENTENCEPIECE_MODULE"); path && *path) return {path};
  return {kSentencePieceModuleBuildPath, kSentencePieceModuleInstallPath};
}

template <typename Fn>
void resolve(void* handle, const char* name, Fn& fn, const std::string& path) {
  fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (!fn) throw TokenizerError("SentencePiece module " + path + " lacks " + name);
}

const ShimApi& shim() {
  static std::once_flag once;
  static ShimApi api;
  static std::string failure;
  // AddressSanitizer refuses RTLD_DEEPBIND (its interceptors must stay
  // first; google/sanitizers#611), so a sanitizer build (scripts/sanitize.sh)
  // opens the module without it: RTLD_LOCAL still keeps its symbols out of
  // the global scope, only its own lookups may then resolve to ours.
#ifdef __SANITIZE_ADDRESS__
  constexpr int kDeepBind = 0;
#else
  constexpr int kDeepBind = RTLD_DEEPBIND;
#endif
  std::call_once(once, [] {
    std::string tried;
    for (const std::string& path : module_candidates()) {
      std::error_code error;
      if (!std::filesystem::exists(path, error)) {
        tried += (tried.empty() ? "" : ", ") + path + " (missing)";
        continue;
      }
      void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | kDeepBind);
      if (!handle) {
        tried += (tried.empty() ? "" : ", ") + path + " (" + dlerror() + ")";
        continue;
      }
      try {
        resolve(handle, "meshrun_spm_abi_version", api.abi_version, path);
        if (api.abi_version() != MESHRUN_SPM_ABI_VERSION)
          throw TokenizerError("SentencePiece module " + path + " has another interface version");
        resolve(handle, "meshrun_spm_load", api.load, path);
        resolve(handle, "meshrun_spm_close", api.close, path);
        resolve(handle, "meshrun_spm_free", api.free, path);
        resolve(handle, "meshrun_spm_encode", api.encode, path);
        resolve(handle, "meshrun_spm_decode", api.decode, path);
        resolve(handle, "meshrun_spm_vocab_size", api.vocab_size, path);
        resolve(handle, "meshrun_spm_bos_id", api.bos_id, path);
        resolve(handle, "meshrun_spm_eos_id", api.eos_id, path);
        resolve(handle, "meshrun_spm_pad_id", api.pad_id, path);
        resolve(handle, "meshrun_spm_unk_id", api.unk_id, path);
        resolve(handle, "meshrun_spm_piece_to_id", api.piece_to_id, path);
        resolve(handle, "meshrun_spm_id_to_piece", api.id_to_piece, path);
        resolve(handle, "meshrun_spm_is_control", api.is_control, path);
        return;
      } catch (const TokenizerError& error) {
        failure = error.what();
        return;
      }
    }
    failure = "the SentencePiece module (libmeshrun_sentencepiece.so) was not found: tried " + tried +
              "; set MESHRUN_SENTENCEPIECE_MODULE to its path";
  });
  if (!failure.empty()) throw TokenizerError(failure);
  return api;
}

std::string take_error(const ShimApi& api, char* error) {
  std::string message = error ? error : "unknown error";
  api.free(error);
  return message;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  SentencePieceTokenizer(const std::filesystem::path& path, const TokenizerConfig& config)
      : api_(shim()), origin_("tokenizer.model at " + path.string()) {
    char* error = nullptr;
    model_ = api_.load(path.c_str(), &error);
    if (!model_) throw TokenizerError(origin_ + ": " + take_error(api_, error));
    vocab_size_ = api_.vocab_size(model_);
    auto optional_id = [](int32_t id) { return id >= 0 ? std::optional<int32_t>(id) : std::nullopt; };
    auto configured = [&](const std::optional<std::string>& token, std::optional<int32_t> fallback, const char* what) {
      if (!token) return fallback;
      auto id = token_to_id(*token);
      if (!id) throw TokenizerError(config.path + ": " + what + " \"" + *token + "\" is not a piece of " + origin_);
      return id;
    };
    bos_ = configured(config.bos_token, optional_id(api_.bos_id(model_)), "bos_token");
    eos_ = configured(config.eos_token, optional_id(api_.eos_id(model_)), "eos_token");
    pad_ = configured(config.pad_token, optional_id(api_.pad_id(model_)), "pad_token");
    add_bos_ = config.add_bos_token.value_or(true) && bos_;
    add_eos_ = config.add_eos_token.value_or(false) && eos_;
    if (bos_) bos_token_ = piece(*bos_);
    if (eos_) eos_token_ = piece(*eos_);
    chat_ = ChatFormatter(config.chat_template, config.chat_template_origin.empty() ? origin_ : config.chat_template_origin);
  }

  ~SentencePieceTokenizer() override { api_.close(model_); }

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    int32_t* ids = nullptr;
    size_t count = 0;
    char* error = nullptr;
    if (api_.encode(model_, text.data(), text.size(), &ids, &count, &error) != 0)
      throw TokenizerError(origin_ + ": encoding failed: " + take_error(api_, error));
    std::vector<int32_t> out;
    out.reserve(count + 2);
    if (add_special && add_bos_) out.push_back(*bos_);
    out.insert(out.end(), ids, ids + count);
    api_.free(ids);
    if (add_special && add_eos_) out.push_back(*eos_);
    return out;
  }

  // Control pieces (<s>, </s>) decode to nothing in SentencePiece; unless
  // skip_special they are written as their piece, between decoded runs.
  std::string decode(std::span<const int32_t> ids, bool skip_special) const override {
    std::string text;
    std::vector<int32_t> run;
    auto flush = [&] {
      if (run.empty()) return;
      char* decoded = nullptr;
      size_t length = 0;
      char* error = nullptr;
      if (api_.decode(model_, run.data(), run.size(), &decoded, &length, &error) != 0)
        throw TokenizerError(origin_ + ": decoding failed: " + take_error(api_, error));
      text.append(decoded, length);
      api_.free(decoded);
      run.clear();
    };
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size_)
        throw TokenizerError(origin_ + ": unknown token id " + std::to_string(id) + " (vocabulary size " +
                             std::to_string(vocab_size_) + ")");
      if (api_.is_control(model_, id)) {
        flush();
        if (!skip_special) text += piece(id);
      } else {
        run.push_back(id);
      }
    }
    flush();
    return text;
  }

  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> bos_id() const override { return bos_; }
  std::optional<int32_t> eos_id() const override { return eos_; }
  std::optional<int32_t> pad_id() const override { return pad_ ? pad_ : eos_; }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    const int32_t id = api_.piece_to_id(model_, token.data(), token.size());
    return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
  }

  std::string apply_chat_template(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const override {
    return chat_.apply(messages, add_generation_prompt, bos_token_, eos_token_);
  }

  std::string render_chat(const nlohmann::ordered_json& conversation, bool add_generation_prompt) const override {
    return chat_.render(conversation, add_generation_prompt, bos_token_, eos_token_);
  }

  void set_chat_template_variables(const nlohmann::ordered_json& variables) override {
    chat_.set_variables(variables);
  }

  std::optional<MarkedChat> render_chat_marked(const std::vector<ChatMessage>& messages) const override {
    return chat_.apply_marked(messages, bos_token_, eos_token_);
  }

  std::string description() const override { return origin_; }

 private:
  std::string piece(int32_t id) const {
    size_t length = 0;
    const char* text = api_.id_to_piece(model_, id, &length);
    return text ? std::string(text, length) : std::string();
  }

  const ShimApi& api_;
  std::string origin_;
  meshrun_spm* model_ = nullptr;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_, eos_, pad_;
  bool add_bos_ = false, add_eos_ = false;
  std::string bos_token_, eos_token_;
  ChatFormatter chat_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_model(const std::filesystem::path& path, const TokenizerConfig& config) {
  return std::make_unique<SentencePieceTokenizer>(path, config);
}

}  // namespace meshrun::tokenizer_detail
