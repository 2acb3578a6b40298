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
//
// With --transformers, then the GRPO workload (issue #36): 8 prompts x 8
// samples, max_new_tokens 256, and 64 of the 4096 token ids stop a sequence
// (a near-uniform random model stops with about 1.6 % probability per
// token: long-tailed lengths, p50 about 44, p90 about 150, some at the cap).
// The same model directory (save_hf_model) is sampled by meshrun's engine and
// by transformers' `generate` (bench/rollout_transformers.py, one static
// batch as TRL's GRPOTrainer runs it), and both are set against the
// roofline: the run's weight and KV reads at the measured memory bandwidth,
// its FLOPs at the measured matmul rate, whichever bounds it. Each timed
// rollout is followed by the same one through the unfused decode layers
// (src/model/cpu_decode_step.hpp), which must give the same tokens.
//
// With --linears, instead: the decode step's products of the default
// model's shapes at 1-64 rows, meshrun's kernels (src/model/decode_kernels.hpp)
// against at::linear (MKL), interleaved in rounds, GFLOP/s as medians.
//
// With --device cuda, instead: decode steps of a 1B bf16 model on the GPU,
// replayed from CUDA graphs and eager, against the HBM roofline (gpu_decode).
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "meshrun/model/hf_model.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/model/model.hpp"
#include "bench_support.hpp"
#include "src/model/cpu_decode_step.hpp"
#include "src/model/decode_kernels.hpp"
#include "src/rollout/decode_graphs.hpp"
#include "profile_summary.hpp"

namespace {

using meshrun::bench::field;
using meshrun::bench::median;
using meshrun::bench::run_and_capture;

struct Shape {
  int64_t vocab = 4096, hidden = 256, layers = 4, heads = 8, kv_heads = 4, intermediate = 704;
  int64_t batch = 8, prompt = 32, new_tokens = 64;
};

meshrun::ModelOptions model_options(const Shape& s) {
  meshrun::ModelOptions options;
  options.config.vocab = s.vocab;
  options.config.hidden = s.hidden;
  options.config.layers = s.layers;
  options.config.heads = s.heads;
  options.config.kv_heads = s.kv_heads;
  options.config.intermediate = s.intermediate;
  options.config.max_position = 4096;
  return options;
}

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

// The machine's ceilings at the set thread count: bytes/s of a large copy
// (read + write) and FLOP/s of a large fp32 matmul, best of three.
struct Ceilings {
  double bandwidth = 0, flops = 0;
};
Ceilings measure_ceilings() {
  Ceilings out;
  const torch::Tensor source = torch::rand({64 * 1024 * 1024});  // 256 MiB
  torch::Tensor target = torch::empty_like(source);
  const torch::Tensor a = torch::rand({1024, 1024}), b = torch::rand({1024, 1024});
  target.copy_(source);
  (void)torch::mm(a, b);
  for (int i = 0; i < 3; ++i) {
    auto start = std::chrono::steady_clock::now();
    target.copy_(source);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.bandwidth = std::max(out.bandwidth, 2.0 * static_cast<double>(source.nbytes()) / seconds);
    start = std::chrono::steady_clock::now();
    (void)torch::mm(a, b);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.flops = std::max(out.flops, 2.0 * 1024.0 * 1024.0 * 1024.0 / seconds);
  }
  return out;
}

// The GRPO workload: meshrun's engine and transformers' generate on one
// model directory, and the roofline of meshrun's run.
void grpo_workload(const Shape& s, const std::string& python, const std::string& script, int threads, int repeats,
                   const std::string& profile_path) {
  constexpr int64_t kGroups = 8, kGroupSize = 8, kPrompt = 32, kMaxNew = 256, kStopIds = 64;
  const meshrun::ModelOptions options = model_options(s);
  torch::manual_seed(0);
  meshrun::LlamaModel model(options);
  const std::filesystem::path folder =
      std::filesystem::temp_directory_path() / ("meshrun-rollout-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(folder);
  meshrun::save_hf_model((folder / "model").string(), model);

  std::vector<int64_t> stop_ids;
  for (int64_t i = 0; i < kStopIds; ++i) stop_ids.push_back(s.vocab - 1 - i * (s.vocab / kStopIds));
  std::vector<std::vector<int32_t>> prompts;
  torch::manual_seed(2);
  const torch::Tensor ids = torch::randint(0, s.vocab / 2, {kGroups, kPrompt}, torch::kInt32);
  for (int64_t group = 0; group < kGroups; ++group)
    for (int64_t k = 0; k < kGroupSize; ++k)
      prompts.emplace_back(ids[group].data_ptr<int32_t>(), ids[group].data_ptr<int32_t>() + kPrompt);
  {
    std::ofstream prompt_file(folder / "prompts.json"), stop_file(folder / "stop_ids.json");
    prompt_file << "[";
    for (size_t i = 0; i < prompts.size(); ++i) {
      prompt_file << (i ? ",[" : "[");
      for (size_t t = 0; t < prompts[i].size(); ++t) prompt_file << (t ? "," : "") << prompts[i][t];
      prompt_file << "]";
    }
    prompt_file << "]";
    stop_file << "[";
    for (size_t i = 0; i < stop_ids.size(); ++i) stop_file << (i ? "," : "") << stop_ids[i];
    stop_file << "]";
  }

  meshrun::Generator generator(model, nullptr, kGroups * kGroupSize, kPrompt + kMaxNew);
  meshrun::SamplingOptions sampling;
  sampling.temperature = 1.0;
  sampling.top_p = 0.9;
  sampling.max_new_tokens = kMaxNew;
  sampling.stop_ids = stop_ids;
  generator.generate(prompts, [&] { auto warm = sampling; warm.max_new_tokens = 4; return warm; }());
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  // What a decode step reads besides the KV cache: every weight but the
  // embedding table (only the live rows of it are read).
  const double weights = static_cast<double>(params - s.vocab * s.hidden);
  const double kv_elements_per_token = 2.0 * static_cast<double>(s.layers * s.kv_heads * (s.hidden / s.heads));
  // The ceilings are measured before every timed run and once after, and
  // the best of them is the roofline's: this machine's rate drifts by tens
  // of per cent over minutes, and a bound from one slow moment would flatter
  // meshrun.
  Ceilings ceilings;
  const auto raise_ceilings = [&] {
    const Ceilings now = measure_ceilings();
    ceilings.bandwidth = std::max(ceilings.bandwidth, now.bandwidth);
    ceilings.flops = std::max(ceilings.flops, now.flops);
  };
  std::vector<double> rates, lengths, unfused_rates;
  const bool fuses = [&] {  // as the engine's steps run: without autograd
    torch::NoGradGuard no_grad;
    return model->decode_layers_fuse();
  }();
  struct RunWork {
    double tokens, bytes, flops;
  };
  std::vector<RunWork> runs;
  double utilization = 0;
  for (int i = 0; i < repeats; ++i) {
    raise_ceilings();
    sampling.seed = static_cast<uint64_t>(100 + i);
    const auto start = std::chrono::steady_clock::now();
    const auto samples = generator.generate(prompts, sampling);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const meshrun::GenerationStats& stats = generator.stats();
    double tokens = 0, kv_read = 0;  // kv_read in elements
    for (const auto& sample : samples) {
      const auto n = static_cast<double>(sample.response.size());
      tokens += n;
      lengths.push_back(n);
      // Each decode step reads its sequence's whole cache so far.
      kv_read += (static_cast<double>(kPrompt) * n + n * (n - 1) / 2) * kv_elements_per_token;
    }
    const double bytes = 4.0 * (static_cast<double>(stats.decode_steps) * weights + kv_read);
    // Two FLOPs per weight per token (prefill and decode), and per cached
    // element read (q·k for keys, p·v for values).
    const double flops =
        2.0 * weights * (tokens + static_cast<double>(stats.prefilled_tokens)) + 2.0 * kv_read * s.heads / s.kv_heads;
    rates.push_back(tokens / seconds);
    runs.push_back({tokens, bytes, flops});
    utilization += stats.slot_utilization() / repeats;
    // The same rollout through the unfused decode layers, interleaved: the
    // fused ones' gain, and the same tokens (they keep the unfused bits).
    if (fuses) {
      const meshrun::model_detail::UnfusedDecodeScope unfused_layers;
      const auto unfused_start = std::chrono::steady_clock::now();
      const auto unfused_samples = generator.generate(prompts, sampling);
      unfused_rates.push_back(
          tokens / std::chrono::duration<double>(std::chrono::steady_clock::now() - unfused_start).count());
      for (size_t k = 0; k < samples.size(); ++k)
        if (samples[k].response != unfused_samples[k].response)
          throw std::runtime_error("sample " + std::to_string(k) + " differs between the fused and unfused decode layers");
    }
  }
  raise_ceilings();
  std::vector<double> bounds;
  for (const RunWork& run : runs)
    bounds.push_back(run.tokens / std::max(run.bytes / ceilings.bandwidth, run.flops / ceilings.flops));
  if (!profile_path.empty()) {
    const auto start = std::chrono::steady_clock::now();
    {
      torch::autograd::profiler::RecordProfile guard(profile_path);
      generator.generate(prompts, sampling);
    }
    meshrun::bench::print_profile(
        profile_path, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), "rollout");
  }
  std::sort(lengths.begin(), lengths.end());
  const auto quantile = [&](double q) {
    const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(lengths.size())));
    return lengths[std::min(lengths.size(), std::max<size_t>(1, rank)) - 1];
  };
  const std::string output = run_and_capture(fmt::format(
      "{} {} --model {} --prompts {} --stop-ids {} --max-new-tokens {} --threads {} --repeats {}", python, script,
      (folder / "model").string(), (folder / "prompts.json").string(), (folder / "stop_ids.json").string(), kMaxNew,
      threads, repeats));
  std::filesystem::remove_all(folder);
  const double transformers_rate = field(output, "tokens_per_s");
  const double meshrun_rate = median(rates), roofline = median(bounds);
  fmt::print("\nGRPO workload: {} groups x {} samples, prompt {}, max_new_tokens {}, {} stop ids (lengths p50 {:.0f}, "
             "p90 {:.0f}, max {:.0f}; slot utilization {:.2f}); ceilings {:.1f} GB/s, {:.1f} GFLOP/s\n",
             kGroups, kGroupSize, kPrompt, kMaxNew, kStopIds, quantile(0.5), quantile(0.9), quantile(1.0),
             utilization, ceilings.bandwidth / 1e9, ceilings.flops / 1e9);
  fmt::print("{:.1f}M d{} x{}: meshrun {:.1f} tok/s; transformers generate {:.1f} tok/s ({:.2f}x); roofline {:.1f} "
             "tok/s ({:.0f}%)\n",
             static_cast<double>(params) / 1e6, s.hidden, s.layers, meshrun_rate, transformers_rate,
             meshrun_rate / transformers_rate, roofline, 100.0 * meshrun_rate / roofline);
  if (fuses)
    fmt::print("  meshrun with the unfused decode layers {:.1f} tok/s (the fused ones {:.2f}x, the same tokens)\n",
               median(unfused_rates), meshrun_rate / median(unfused_rates));
}

// The decode step's products: for each weight shape of the model and row
// count, `rounds` interleaved timings of at::linear and of meshrun's
// small-batch kernels (each the mean of enough calls to take ~20 ms).
void decode_linears(const Shape& s, int rounds) {
  torch::NoGradGuard no_grad;
  const meshrun::model_detail::DecodeStepScope decode_step;
  const int64_t kv = s.kv_heads * (s.hidden / s.heads);
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {s.hidden, kv}, {s.hidden, s.hidden}, {s.hidden, s.intermediate}, {s.intermediate, s.hidden}, {s.hidden, s.vocab}};
  fmt::print("decode-step products (x [rows, in] · W [out, in]ᵀ), GFLOP/s, medians of {} interleaved rounds:\n", rounds);
  for (const auto& [in, out] : shapes) {
    const torch::Tensor weight = torch::randn({out, in});
    for (const int64_t rows : {1, 4, 8, 12, 13, 16, 24, 32, 48, 64}) {
      const torch::Tensor x = torch::randn({rows, in});
      if (!meshrun::model_detail::small_batch_linear_applies(x, weight)) continue;
      const double flops = 2.0 * static_cast<double>(rows * in * out);
      const int calls = static_cast<int>(std::clamp(2e-2 * 5e10 / flops, 5.0, 2000.0));
      const auto rate = [&](const auto& product) {
        (void)product();
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) (void)product();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        return flops * calls / seconds / 1e9;
      };
      std::vector<double> library, ours;
      for (int round = 0; round < rounds; ++round) {
        library.push_back(rate([&] { return at::linear(x, weight); }));
        ours.push_back(rate([&] { return meshrun::model_detail::small_batch_linear(x, weight); }));
      }
      const double a = median(library), b = median(ours);
      fmt::print("  [{:>2}, {:>4}] x [{:>4}, {:>4}]^T: meshrun {:6.1f}, at::linear {:6.1f} ({:.2f}x)\n", rows, in, out,
                 in, b, a, b / a);
    }
  }
  fmt::print("  1024^2 matmul (the roofline's ceiling, best of 3): {:.1f}\n", measure_ceilings().flops / 1e9);
}

// On a GPU (issue #36's GPU aim): a Llama-3.2-1B-shaped model in bf16 (random
// weights) decoding `live` sequences of `prompt` + `new_tokens` tokens (no
// stop id: every sequence runs to the cap, so `live` stay live), with decode
// steps replayed from CUDA graphs and eager, interleaved over `repeats`
// rounds, against the HBM roofline: per decode step the weights (the tied
// embedding read whole as the LM head) and every live sequence's cache so
// far, at the bandwidth of a 1 GiB device copy (read + write).
void gpu_decode(int64_t live, int64_t prompt, int64_t new_tokens, int repeats) {
  if (!torch::cuda::is_available()) throw std::runtime_error("--device cuda: no CUDA device visible");
  const torch::Device device(torch::kCUDA, 0);
  meshrun::ModelOptions options;
  meshrun::ModelConfig& c = options.config;
  c.vocab = 128256;
  c.hidden = 2048;
  c.layers = 16;
  c.heads = 32;
  c.kv_heads = 8;
  c.intermediate = 8192;
  c.max_position = 131072;
  c.rope_theta = 500000;
  c.tied_embeddings = true;
  options.dtype = torch::kBFloat16;
  options.device = device;
  torch::manual_seed(0);
  meshrun::LlamaModel model(options);
  std::vector<std::vector<int32_t>> prompts;
  const torch::Tensor ids = torch::randint(0, c.vocab, {live, prompt}, torch::kInt32);
  for (int64_t row = 0; row < live; ++row)
    prompts.emplace_back(ids[row].data_ptr<int32_t>(), ids[row].data_ptr<int32_t>() + prompt);
  meshrun::Generator graphed(model, nullptr, live, prompt + new_tokens, 0, meshrun::Generator::kDefaultKvBlockSize,
                             meshrun::Generator::kDefaultPrefillChunk, true);
  meshrun::Generator eager(model, nullptr, live, prompt + new_tokens);
  meshrun::SamplingOptions sampling;
  sampling.temperature = 1.0;
  sampling.max_new_tokens = new_tokens;
  // Warm-up: every batch bucket is captured in the first call.
  graphed.generate(prompts, sampling);
  eager.generate(prompts, sampling);
  const auto timed = [&](meshrun::Generator& generator) {
    torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    generator.generate(prompts, sampling);
    torch::cuda::synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<double> graphed_s, eager_s;
  for (int i = 0; i < repeats; ++i) {
    sampling.seed = static_cast<uint64_t>(i);
    graphed_s.push_back(timed(graphed));
    eager_s.push_back(timed(eager));
  }
  // HBM bandwidth: best of three 1 GiB copies.
  const torch::Tensor source = torch::empty({int64_t{1} << 29}, torch::TensorOptions().dtype(torch::kBFloat16).device(device));
  torch::Tensor target = torch::empty_like(source);
  double bandwidth = 0;
  for (int i = 0; i < 4; ++i) {
    torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    target.copy_(source);
    torch::cuda::synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) bandwidth = std::max(bandwidth, 2.0 * static_cast<double>(source.nbytes()) / seconds);
  }
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  const double kv_per_token = 2.0 * 2.0 * static_cast<double>(c.layers * c.kv_heads * c.head_dim());  // bf16 k and v
  double step_bytes = 0;  // Σ over the decode steps of what each reads
  for (int64_t t = 1; t < new_tokens; ++t)
    step_bytes += 2.0 * static_cast<double>(params) + static_cast<double>(live) * static_cast<double>(prompt + t) * kv_per_token;
  const double tokens = static_cast<double>(live * new_tokens);
  const double roofline = tokens / (step_bytes / bandwidth);
  const double graphed_rate = tokens / median(graphed_s), eager_rate = tokens / median(eager_s);
  const auto& by_batch = graphed.decode_graphs()->steps_by_batch();
  fmt::print("GPU decode: {:.2f}B bf16 (Llama-3.2-1B shape), {} live x prompt {} + {} new tokens; HBM {:.0f} GB/s; "
             "{} graphs captured\n",
             static_cast<double>(params) / 1e9, live, prompt, new_tokens, bandwidth / 1e9,
             graphed.decode_graphs()->captures());
  fmt::print("meshrun CUDA graphs {:.1f} tok/s ({:.0f}% of the HBM roofline {:.1f} tok/s); eager {:.1f} tok/s "
             "({:.0f}%); graphs {:.2f}x eager; steps by batch bucket:",
             graphed_rate, 100.0 * graphed_rate / roofline, roofline, eager_rate, 100.0 * eager_rate / roofline,
             graphed_rate / eager_rate);
  for (const auto& [batch, steps] : by_batch) fmt::print(" {}:{}", batch, steps);
  fmt::print("\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("meshrun rollout benchmark: KV cache vs recomputation vs Python PyTorch");
  Shape s;
  std::string python = MESHRUN_TORCH_PYTHON, baseline;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int repeats = 3;
  std::string transformers;
  app.add_option("--baseline", baseline, "bench/rollout_baseline.py (the CPU comparison)");
  std::string device = "cpu";
  app.add_option("--device", device,
                 "cuda: only the GPU decode of a 1B bf16 model, CUDA graphs against eager and the HBM roofline "
                 "(--batch live sequences, default 64; --prompt, --new-tokens)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--transformers", transformers,
                 "bench/rollout_transformers.py: also run the GRPO workload against transformers' generate");
  app.add_option("--python", python, "Python with the torch meshrun is built against");
  app.add_option("--threads", threads, "Threads for both sides");
  app.add_option("--repeats", repeats, "Timed runs per side (median)");
  app.add_option("--batch", s.batch, "Sequences");
  app.add_option("--prompt", s.prompt, "Prompt tokens");
  app.add_option("--new-tokens", s.new_tokens, "Generated tokens per sequence");
  std::string profile_path;
  app.add_option("--profile", profile_path,
                 "with --transformers: one more GRPO rollout under LibTorch's profiler, its trace written here")
      ->needs("--transformers");
  bool linears = false;
  app.add_flag("--linears", linears, "only the decode step's products: meshrun's kernels against at::linear");
  bool grpo_only = false;
  app.add_flag("--grpo-only", grpo_only, "only the GRPO workload (with --transformers)")->needs("--transformers");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(threads);
  if (device == "cuda") {
    const bool batch_set = app.count("--batch") > 0, prompt_set = app.count("--prompt") > 0,
               new_set = app.count("--new-tokens") > 0;
    try {
      gpu_decode(batch_set ? s.batch : 64, prompt_set ? s.prompt : 128, new_set ? s.new_tokens : 256, repeats);
    } catch (const std::exception& error) {
      std::fprintf(stderr, "rollout_bench: %s\n", error.what());
      return 1;
    }
    return 0;
  }
  if (linears) {
    decode_linears(s, std::max(repeats, 3));
    return 0;
  }
  if (baseline.empty()) {
    std::fprintf(stderr, "rollout_bench: --baseline bench/rollout_baseline.py is needed on the CPU\n");
    return 2;
  }
  if (grpo_only) {
    grpo_workload(s, python, transformers, threads, repeats, profile_path);
    return 0;
  }

  const meshrun::ModelOptions options = model_options(s);
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
  if (!transformers.empty()) grpo_workload(s, python, transformers, threads, repeats, profile_path);
  return 0;
}
