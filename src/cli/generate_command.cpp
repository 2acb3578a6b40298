// `meshrun generate MODEL [--prompt TEXT | --prompts FILE.jsonl] ...`: runs
// the rollout engine (include/meshrun/rollout/generation.hpp) on a Hugging Face
// style model directory and prints the continuations, so a user can see what
// a model or a checkpoint does. Greedy at temperature 0 (the default).
// Text output prints the continuation of a single prompt as is, and of
// several prompts (or samples: --num-samples N gives each prompt N, which
// share its prefill) one per block headed "[i]"; --format jsonl prints one
// object per sample: prompt, sample index, response, tokens and why it
// stopped.
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "commands.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/lora_adapter.hpp"
#include "meshrun/data/prompts.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "meshrun/train/train_engine.hpp"
#include "meshrun/train/train_threads.hpp"

namespace meshrun::cli {
namespace {

std::unique_ptr<Tokenizer> tokenizer_for(const GenerateOptions& options) {
  if (!options.tokenizer.empty()) return load_tokenizer(options.tokenizer);
  namespace fs = std::filesystem;
  const fs::path dir(options.model);
  std::error_code error;
  if (fs::is_directory(dir, error) && !fs::exists(dir / "tokenizer.json", error) &&
      !fs::exists(dir / "tokenizer.model", error))
    throw TokenizerError("the model directory " + options.model +
                         " has no tokenizer.json or tokenizer.model; pass --tokenizer (builtin:bytes for a model "
                         "trained from a builtin: preset)");
  return load_tokenizer(options.model);
}

std::vector<std::vector<int32_t>> prompts_for(const GenerateOptions& options, const Tokenizer& tokenizer,
                                              std::vector<std::string>& texts) {
  std::vector<std::vector<int32_t>> prompts;
  if (options.prompts_file) {
    DataConfig config;
    config.path = *options.prompts_file;
    config.input_key = options.input_key;
    const PromptDataset dataset = load_prompt_dataset(config, tokenizer, options.max_prompt_len);
    for (const auto& prompt : dataset.prompts) {
      prompts.push_back(prompt.ids);
      texts.push_back(tokenizer.decode(prompt.ids, true));
    }
    return prompts;
  }
  const std::string text = options.prompt.value_or("");
  const std::string rendered = options.chat ? tokenizer.apply_chat_template({{"user", text}}, true) : text;
  prompts.push_back(options.chat ? tokenizer.encode(rendered, false) : encode_prompt(rendered, tokenizer, options.max_prompt_len));
  if (prompts.back().empty()) throw TokenizerError("--prompt: the prompt encodes to no token");
  texts.push_back(text);
  return prompts;
}

}  // namespace

int generate_command(const GenerateOptions& options) {
  try {
    auto tokenizer = tokenizer_for(options);
    std::vector<std::string> texts;
    const auto distinct = prompts_for(options, *tokenizer, texts);
    // Each prompt's samples next to each other: the engine prefills a run of
    // identical prompts once.
    if (static_cast<double>(distinct.size()) * static_cast<double>(options.num_samples) > double(1 << 24))
      throw ConfigError("--num-samples " + std::to_string(options.num_samples) + " × " +
                        std::to_string(distinct.size()) + " prompts is more than 16 777 216 samples");
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::string> sample_texts;
    for (size_t i = 0; i < distinct.size(); ++i)
      for (int64_t n = 0; n < options.num_samples; ++n) {
        prompts.push_back(distinct[i]);
        sample_texts.push_back(texts[i]);
      }
    texts = std::move(sample_texts);

    ModelOptions model_options;
    model_options.dtype = dtype_from_recipe_name(options.dtype);
    model_options.device = options.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
    torch::manual_seed(options.seed);  // the weights of a builtin: preset
    LlamaModel model = load_hf_model(options.model, model_options);
    if (!options.adapter.empty()) {
      const LoraAdapter adapter = read_peft_adapter(options.adapter, model->config());
      std::map<std::string, torch::Tensor> weights = gather_full_state(model);
      merge_lora(weights, adapter);
      scatter_full_state(model, weights);
    }

    size_t longest = 1;
    for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
    // As vLLM's max_model_len: a sample never runs past the positions the
    // model has (and the KV cache is sized by what it may reach).
    const int64_t context = model->config().max_position;
    if (context > 0 && static_cast<int64_t>(longest) + options.max_new_tokens > context)
      throw ConfigError("the longest prompt (" + std::to_string(longest) + " tokens) and --max-new-tokens " +
                        std::to_string(options.max_new_tokens) + " pass the model's context of " +
                        std::to_string(context) + " positions (max_position_embeddings); lower --max-new-tokens " +
                        "or --max-prompt-len");
    const int64_t batch = std::min<int64_t>(static_cast<int64_t>(prompts.size()), options.batch);
    // CUDA graphs where the model admits them (the plan's rule for engines).
    const bool graphs = model_options.device.is_cuda() && !options.eager &&
                        decode_graph_blocker(model->config(), 1).empty();
    Generator generator(model, nullptr, batch, static_cast<int64_t>(longest) + options.max_new_tokens, 0,
                        Generator::kDefaultKvBlockSize, Generator::kDefaultPrefillChunk, graphs);

    if (model_options.device.is_cpu()) {
      // The OpenMP team follows the CPUs other processes leave it, as in
      // training (meshrun/train/train_threads.hpp).
      train_detail::govern_thread_team(at::get_num_threads());
      generator.set_between_steps([] { train_detail::adapt_training_threads(); });
    }

    SamplingOptions sampling;
    sampling.temperature = options.temperature;
    sampling.top_p = options.top_p;
    sampling.top_k = options.top_k;
    sampling.max_new_tokens = options.max_new_tokens;
    const std::optional<int32_t> eos = tokenizer->eos_id();
    sampling.stop_ids = generation_stop_ids(options.model, eos ? std::optional<int64_t>(*eos) : std::nullopt);
    sampling.pad_id = tokenizer->pad_id().value_or(0);
    sampling.vocab_limit = tokenizer->vocab_size();
    sampling.seed = options.seed;
    const auto samples = generator.generate(prompts, sampling);

    for (size_t i = 0; i < samples.size(); ++i) {
      const std::string response = tokenizer->decode(samples[i].response, true);
      if (options.format == "jsonl") {
        nlohmann::json line = {{"prompt", texts[i]},
                               {"sample", static_cast<int64_t>(i) % options.num_samples},
                               {"response", response},
                               {"tokens", samples[i].response.size()},
                               {"stop", samples[i].stopped_at_eos ? "eos" : "length"},
                               {"response_ids", samples[i].response}};
        // A sampled byte sequence need not be valid UTF-8: replace what is not
        // (response_ids hold the exact tokens).
        std::fputs((line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n").c_str(), stdout);
      } else if (samples.size() == 1) {
        std::fputs((response + "\n").c_str(), stdout);
      } else {
        std::fputs(("[" + std::to_string(i + 1) + "] " + response + "\n").c_str(), stdout);
      }
    }
    return kOk;
  } catch (const c10::Error& error) {
    // LibTorch's own (e.g. an allocation the machine refuses): its message
    // without the C++ backtrace.
    std::fprintf(stderr, "meshrun generate: %s\n", error.what_without_backtrace());
    return kFailed;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "meshrun generate: %s\n", error.what());
    return kFailed;
  }
}

}  // namespace meshrun::cli
