// bench/rollout: generated tokens/s of meshrun's rollout engine on this
// machine's CPU, in one run:
// (a) with the KV cache (what rollouts and `meshrun generate` use),
// (b) recomputing the whole prefix every step (the same engine with
//     use_cache = false: what the cache saves), and
// (c) a Python PyTorch sampling loop of the same model with a Hugging
//     Face-style cache (bench/rollout_baseline.py in the project's .venv,
//     the same torch, same thread count, same shapes).
// Sampling at temperature 1, top-p 0.9, no eos (every sequence generates
// exactly new_tokens), so the three do the same work. Figures are medians
// of --repeats runs after a warm-up.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "meshrun/rollout/generation.hpp"
#include "meshrun/model/model.hpp"
#include "bench_support.hpp"

namespace {

using meshrun::bench::field;
using meshrun::bench::median;
using meshrun::bench::run_and_capture;

struct Shape {
  int64_t vocab = 4096, hidden = 256, layers = 4, heads = 8, kv_heads = 4, intermediate = 704;
  int64_t batch = 8, prompt = 32, new_tokens = 64;
};

// Median seconds of one generate() over the shape's prompts.
double time_meshrun(meshrun::Generator& generator, const Shape& s, bool use_cache, int repeats) {
  std::vector<std::vector<int32_t>> prompts;
  torch::manual_seed(1);
  const torch::Tensor ids = torch::randint(0, s.vocab, {s.batch, s.prompt}, torch::kInt32);
  for (int64_t row = 0; row < s.batch; ++row)
    prompts.emplace_back(ids[row].data_ptr<int32_t>(), ids[row].data_ptr<int32_t>() + s.prompt);
  meshrun::SamplingOptions options;
  options.temperature = 1.0;
  options.top_p = 0.9;
  options.max_new_tokens = s.new_tokens;
  generator.generate(prompts, [&] { auto warm = options; warm.max_new_tokens = 4; return warm; }(), use_cache);
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    options.seed = static_cast<uint64_t>(i);
    const auto start = std::chrono::steady_clock::now();
    const auto samples = generator.generate(prompts, options, use_cache);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    for (const auto& sample : samples)
      if (static_cast<int64_t>(sample.response.size()) != s.new_tokens) throw std::logic_error("a sequence stopped early");
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("meshrun rollout benchmark: KV cache vs recomputation vs Python PyTorch");
  Shape s;
  std::string python = MESHRUN_TORCH_PYTHON, baseline;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int repeats = 3;
  app.add_option("--baseline", baseline, "bench/rollout_baseline.py")->required();
  app.add_option("--python", python, "Python with the torch meshrun is built against");
  app.add_option("--threads", threads, "Threads for both sides");
  app.add_option("--repeats", repeats, "Timed runs per side (median)");
  app.add_option("--batch", s.batch, "Sequences");
  app.add_option("--prompt", s.prompt, "Prompt tokens");
  app.add_option("--new-tokens", s.new_tokens, "Generated tokens per sequence");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(threads);

  meshrun::ModelOptions options;
  options.config.vocab = s.vocab;
  options.config.hidden = s.hidden;
  options.config.layers = s.layers;
  options.config.heads = s.heads;
  options.config.kv_heads = s.kv_heads;
  options.config.intermediate = s.intermediate;
  options.config.max_position = 4096;
  torch::manual_seed(0);
  meshrun::Generator generator(meshrun::LlamaModel(options), nullptr, s.batch, s.prompt + s.new_tokens);
  int64_t params = 0;
  for (const auto& p : generator.model()->parameters()) params += p.numel();

  const double tokens = static_cast<double>(s.batch * s.new_tokens);
  const double cached = time_meshrun(generator, s, true, repeats);
  const double recomputed = time_meshrun(generator, s, false, repeats);
  const std::string output = run_and_capture(fmt::format(
      "{} {} --vocab {} --hidden {} --layers {} --heads {} --kv_heads {} --intermediate {} --batch {} --prompt {} "
      "--new_tokens {} --threads {} --repeats {}",
      python, baseline, s.vocab, s.hidden, s.layers, s.heads, s.kv_heads, s.intermediate, s.batch, s.prompt,
      s.new_tokens, threads, repeats));
  const double python_tokens_per_s = field(output, "tokens_per_s");
  if (static_cast<int64_t>(field(output, "params")) != params)
    throw std::runtime_error("the baseline's model has another parameter count: " + output);

  fmt::print("model: {} parameters (d {}, {} layers, {} heads / {} kv, vocab {}), {} threads\n", params, s.hidden,
             s.layers, s.heads, s.kv_heads, s.vocab, threads);
  fmt::print("batch {} × prompt {} + {} new tokens, temperature 1, top-p 0.9\n", s.batch, s.prompt, s.new_tokens);
  fmt::print("meshrun, KV cache:          {:8.1f} tokens/s\n", tokens / cached);
  fmt::print("meshrun, recomputed prefix: {:8.1f} tokens/s  (cache speed-up {:.2f}×)\n", tokens / recomputed,
             recomputed / cached);
  fmt::print("Python PyTorch loop:        {:8.1f} tokens/s  (meshrun {:.2f}× of it)\n", python_tokens_per_s,
             tokens / cached / python_tokens_per_s);
  return 0;
}
