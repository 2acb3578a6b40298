// bench/train: tokens/s of one SFT training step (forward, cross-entropy,
// backward, clipping, AdamW) of a Llama-style model on this machine's CPU,
// (a) against the identical model and step in Python PyTorch on the same
//     torch (bench/train_baseline.py in the project's .venv, same thread
//     count, run from here in the same session), eager and torch.compile'd
//     (compilation excluded), and
// (b) as achieved FLOP/s over the fp32 matmul FLOP/s measured in the same run
//     (1024² torch::mm, the ceiling any implementation on this BLAS meets).
// Three shapes: "23M" (d 512, 6 layers, seq 256, batch 8, vocab 4096: the
// issue's reference point); "2M" (d 128, 4 layers, seq 128, batch 8, vocab
// 4096: 1 024 tokens a step, still mostly matrix products, the lm_head's
// above all); and "2M-b1", the same model on one sequence of 128 tokens a
// step, where per-operation overhead dominates. meshrun's side runs
// through TrainEngine with dp = 1, ZeRO 0, fp32, exactly as an SFT run does.
//
// Each side is measured in --rounds interleaved rounds (meshrun, Python,
// meshrun, ...) and keeps its fastest round: on a shared machine whose speed
// drifts by ±15 % over minutes (seen here), the best round of each side is
// the figure least disturbed by its neighbours, and interleaving exposes
// both sides to the same drift.
//
// With --profile, meshrun's step is also run under LibTorch's profiler and
// the ops' self times are summed, to say where the time goes.
//
// --heads compares meshrun's two LM heads on each shape instead (issue #39
// item 1): the fused head (LlamaModel::forward_loss_sum, what SFT runs)
// against the unfused one (the whole logits, then the cross-entropy),
// each step measured in a child process of its own (this binary again, with
// --measure-head) in interleaved rounds, printing tokens/s and the child's
// peak resident memory (getrusage's ru_maxrss, the whole process: model,
// optimizer and the step's transients; on a GPU the caching allocator's
// peak of allocated device memory instead). "2M-v128k" is the 2M model with a
// Llama 3 vocabulary of 128 256, where the logits dominate memory.
//
// On a GPU each side's peak of allocated device memory is printed beside
// its tokens/s (issue #39 item 4: meshrun's at most torch.compile's), and
// "8B" is a Llama 3.1 8B shape trained with activation checkpointing on
// both sides (--checkpointing turns it on for any shape); a side that runs
// out of device memory prints "does not fit" instead of failing the run.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

#ifdef MESHRUN_HAVE_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "meshrun/model/model.hpp"
#include "meshrun/train/train_engine.hpp"
#include "bench_support.hpp"
#include "profile_summary.hpp"

namespace {

using meshrun::bench::field;
using meshrun::bench::median;
using meshrun::bench::run_and_capture;

struct Shape {
  std::string name;
  int64_t vocab, hidden, layers, heads, kv_heads, intermediate, seq, batch;
  // Activation checkpointing: each decoder layer keeps its input only and
  // recomputes the rest in backward (both sides).
  bool checkpointing = false;
};

const std::vector<Shape> kShapes = {
    {"23M", 4096, 512, 6, 8, 8, 1408, 256, 8},
    {"2M", 4096, 128, 4, 4, 4, 352, 128, 8},
    {"2M-b1", 4096, 128, 4, 4, 4, 352, 128, 1},
    {"2M-v128k", 128256, 128, 4, 4, 4, 352, 128, 8},
    // GPU only (--device cuda): a Llama 3.2 1B shape, bf16 with fp32 masters.
    {"1B", 128256, 2048, 16, 32, 8, 8192, 2048, 4},
    // GPU only: a Llama 3.1 8B shape, one sequence of 2 048 a step,
    // activation checkpointing on. meshrun's bf16 weights and gradients,
    // fp32 masters and AdamW moments take 16 bytes a parameter (128 GB):
    // it fits a 141 GB H200, not an 80 GB H100.
    {"8B", 128256, 4096, 32, 32, 8, 14336, 2048, 1, true},
};

// Where meshrun's side runs: the CPU in fp32, or CUDA device 0 in bf16 with
// fp32 master weights (what an SFT run on a GPU does).
torch::Device g_device = torch::kCPU;
// meshrun's LM head: fused with the loss (what runs train) or the whole
// logits then the cross-entropy; the fused head's chunk budget (0: default).
bool g_fused_head = true;
int64_t g_chunk_bytes = 0;
bool on_gpu() { return g_device.is_cuda(); }
void synchronize() {
  if (on_gpu()) torch::cuda::synchronize();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The matmul ceiling: fp32 1024² on the CPU, bf16 8192² on a GPU.
double matmul_gflops(double seconds = 2.0) {
  const int64_t n = on_gpu() ? 8192 : 1024;
  const auto options = torch::TensorOptions().device(g_device).dtype(on_gpu() ? torch::kBFloat16 : torch::kFloat32);
  auto a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  torch::mm(a, b);
  synchronize();
  int count = 0;
  auto start = std::chrono::steady_clock::now();
  while (seconds_since(start) < seconds) {
    torch::mm(a, b);
    ++count;
    if (count % 16 == 0) synchronize();
  }
  synchronize();
  return 2.0 * n * n * n * count / seconds_since(start) / 1e9;
}

// Matmul FLOPs of one training step: forward 2 × tokens × (weights of every
// linear, lm_head included) + the attention products (q·kᵀ and p·v, full
// squares, as both implementations compute them), backward twice forward.
double step_flops(const Shape& s) {
  const double tokens = static_cast<double>(s.batch * s.seq);
  const double head_dim = static_cast<double>(s.hidden / s.heads);
  const double per_layer = s.hidden * (s.heads * head_dim) * 2 + s.hidden * (s.kv_heads * head_dim) * 2 +
                           3.0 * s.hidden * s.intermediate;
  const double linear = s.layers * per_layer + static_cast<double>(s.hidden) * s.vocab;
  const double attention = 4.0 * s.batch * s.layers * s.seq * s.seq * s.hidden;
  return 3.0 * (2.0 * tokens * linear + attention);
}

struct Measured {
  double tokens_per_s = 0;
  double step_s = 0;
  int64_t params = 0;
  double loss = 0;
  double peak_mb = 0;  // on a GPU: the peak of allocated device memory
  bool fits = true;    // false: the side ran out of device memory
};

// The fastest of the rounds that fitted.
void keep_fastest(Measured& best, const Measured& round, bool first) {
  if (first || (round.fits && (!best.fits || round.step_s < best.step_s))) best = round;
}

void reset_peak_memory() {
#ifdef MESHRUN_HAVE_CUDA
  if (on_gpu()) c10::cuda::CUDACachingAllocator::resetPeakStats(0);
#endif
}

// The device's peak allocation since reset_peak_memory() in MiB (0 on the CPU).
double peak_device_mb() {
#ifdef MESHRUN_HAVE_CUDA
  if (on_gpu()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    return static_cast<double>(
               stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak) /
           (1024.0 * 1024.0);
  }
#endif
  return 0;
}

meshrun::ModelConfig config_of(const Shape& s) {
  meshrun::ModelConfig config;
  config.hidden = s.hidden;
  config.layers = s.layers;
  config.heads = s.heads;
  config.kv_heads = s.kv_heads;
  config.intermediate = s.intermediate;
  config.vocab = s.vocab;
  config.max_position = s.seq;
  config.tied_embeddings = false;
  return config;
}

Measured measure_meshrun(const Shape& s, int warmup, int steps, const std::string& profile_path) {
  torch::manual_seed(0);
  meshrun::ModelOptions options;
  options.config = config_of(s);
  options.device = g_device;
  options.gradient_checkpointing = s.checkpointing;
  if (on_gpu()) options.dtype = torch::kBFloat16;
  meshrun::LlamaModel model(options);
  meshrun::EngineOptions engine_options;
  engine_options.dtype = options.dtype;
  engine_options.adamw.weight_decay = 0;
  engine_options.schedule = meshrun::LrSchedule::make(meshrun::LrScheduleKind::constant, 1e-4, warmup + steps, 0, 0);
  engine_options.max_norm = 1.0;
  meshrun::TrainEngine engine(model, nullptr, nullptr, engine_options);
  engine.train();

  auto ids = torch::randint(0, s.vocab, {s.batch, s.seq + 1}, torch::TensorOptions().dtype(torch::kInt64).device(g_device));
  using torch::indexing::Slice;
  meshrun::ModelInputs inputs;
  inputs.input_ids = ids.index({Slice(), Slice(0, s.seq)}).contiguous();
  auto labels = ids.index({Slice(), Slice(1, torch::indexing::None)}).contiguous();

  auto one_step = [&] {
    torch::Tensor loss;
    if (g_fused_head) {
      meshrun::FusedHeadOptions head;
      head.chunk_bytes = g_chunk_bytes;
      loss = engine.forward_loss_sum(inputs, labels, head) / static_cast<double>(labels.numel());
    } else {
      loss = meshrun::vocab_parallel_cross_entropy(engine.forward(inputs), labels, nullptr).mean();
    }
    engine.backward(loss, true);
    engine.step();
    return loss.item<double>();
  };
  Measured out;
  std::vector<double> times;
  for (int step = 0; step < warmup + steps; ++step) {
    auto start = std::chrono::steady_clock::now();
    out.loss = one_step();
    if (step >= warmup) times.push_back(seconds_since(start));
  }
  out.step_s = median(times);
  out.tokens_per_s = static_cast<double>(s.batch * s.seq) / out.step_s;
  for (const auto& p : model->parameters()) out.params += p.numel();
  if (!profile_path.empty()) {
    torch::autograd::profiler::RecordProfile guard(profile_path);
    one_step();
  }
  return out;
}

// meshrun's step on a device that may be too small for it: out of memory
// is a figure ("does not fit"), not the end of the run.
Measured measure_meshrun_if_it_fits(const Shape& s, int warmup, int steps, const std::string& profile_path) {
  reset_peak_memory();
  try {
    Measured out = measure_meshrun(s, warmup, steps, profile_path);
    out.peak_mb = peak_device_mb();
    return out;
  } catch (const c10::OutOfMemoryError& error) {
    std::printf("  %s: meshrun ran out of device memory (%s)\n", s.name.c_str(),
                std::string(error.what_without_backtrace()).substr(0, 200).c_str());
    Measured out;
    out.fits = false;
    out.peak_mb = peak_device_mb();
    return out;
  }
}

Measured measure_python(const std::string& python, const std::string& script, const Shape& s, int threads,
                        int warmup, int steps, bool compiled) {
  const std::string command = fmt::format(
      "{} {} --vocab {} --hidden {} --layers {} --heads {} --kv_heads {} --intermediate {} --seq {} --batch {} "
      "--threads {} --warmup {} --steps {}{}{} --device {}",
      python, script, s.vocab, s.hidden, s.layers, s.heads, s.kv_heads, s.intermediate, s.seq, s.batch, threads,
      warmup, steps, compiled ? " --compile" : "", s.checkpointing ? " --checkpointing" : "", on_gpu() ? "cuda" : "cpu");
  const std::string output = run_and_capture(command);
  Measured out;
  if (output.find("baseline out_of_memory") != std::string::npos) {
    out.fits = false;
    out.params = static_cast<int64_t>(field(output, "params"));
    return out;
  }
  out.tokens_per_s = field(output, "tokens_per_s");
  out.step_s = field(output, "step_s");
  out.params = static_cast<int64_t>(field(output, "params"));
  out.peak_mb = field(output, "peak_mb");
  return out;
}

// "N tokens/s" or "does not fit".
std::string speed_of(const Measured& m) {
  return m.fits ? fmt::format("{:.0f} tokens/s", m.tokens_per_s) : "does not fit";
}

// "meshrun/theirs×", or "-" where either did not fit.
std::string ratio_of(const Measured& mine, const Measured& theirs) {
  return mine.fits && theirs.fits ? fmt::format("{:.2f}×", mine.tokens_per_s / theirs.tokens_per_s) : "-";
}

}  // namespace

int main(int argc, char** argv) try {
  // Line by line, so that a run cut short (a device's time limit) keeps
  // the lines already measured.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CLI::App app{"meshrun SFT training-step benchmark vs Python PyTorch"};
  std::string python = MESHRUN_TORCH_PYTHON, script;
  int threads = 2, warmup = 2, steps = 6, rounds = 3;
  std::vector<std::string> only;
  bool profile = false;
  int64_t batch = 0, seq = 0;
  app.add_option("--python", python, "Python with the torch meshrun is built against");
  app.add_option("--baseline", script, "bench/train_baseline.py")->required();
  app.add_option("--threads", threads, "intra-op threads of both sides");
  app.add_option("--warmup", warmup);
  app.add_option("--steps", steps, "timed steps per round (median)");
  app.add_option("--rounds", rounds, "interleaved rounds per side (the fastest counts)")->check(CLI::Range(1, 100));
  app.add_option("--shape", only,
                 "23M, 2M, 2M-b1, 2M-v128k (default: the first three; --heads: 2M, 2M-v128k); with --device cuda "
                 "also 1B (its default) and 8B");
  bool checkpointing = false;
  app.add_flag("--checkpointing", checkpointing, "activation checkpointing on both sides (8B: always)");
  app.add_flag("--profile", profile, "profile one meshrun step per shape");
  bool skip_compile = false;
  app.add_flag("--no-compile", skip_compile, "skip the torch.compile baseline");
  app.add_option("--batch", batch, "sequences per step instead of the shape's")->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "sequence length instead of the shape's")->check(CLI::PositiveNumber);
  bool compare_heads = false;
  std::string measure_head;
  int64_t chunk_mb = 0;
  app.add_flag("--heads", compare_heads, "compare the fused and unfused LM heads (tokens/s, peak memory)");
  app.add_option("--measure-head", measure_head, "(internal) measure one step with this head and exit")
      ->check(CLI::IsMember({"fused", "unfused"}));
  app.add_option("--chunk-mb", chunk_mb, "the fused head's chunk of logits in MiB (0: its default)")
      ->check(CLI::NonNegativeNumber);
  std::string device = "cpu";
  app.add_option("--device", device, "cpu (fp32), or cuda (bf16, fp32 masters; default shape 1B)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);
  const bool shapes_given = !only.empty();
  if (device == "cuda") {
    if (!torch::cuda::is_available()) {
      std::fprintf(stderr, "train_bench: --device cuda but no CUDA device is visible\n");
      return 1;
    }
    g_device = torch::Device(torch::kCUDA, 0);
    if (only.empty()) only = {"1B"};
  } else if (only.empty()) {
    only = {"23M", "2M", "2M-b1"};
  }
  for (const std::string& name : only) {
    const auto known = std::find_if(kShapes.begin(), kShapes.end(), [&](const Shape& s) { return s.name == name; });
    if (known == kShapes.end()) {
      std::fprintf(stderr, "train_bench: unknown shape %s\n", name.c_str());
      return 1;
    }
    if (!on_gpu() && (name == "1B" || name == "8B")) {
      std::fprintf(stderr, "train_bench: shape %s is for --device cuda\n", name.c_str());
      return 1;
    }
  }
  torch::set_num_threads(threads);
  g_chunk_bytes = chunk_mb << 20;
  if (!measure_head.empty()) {
    // A child of --heads: one shape, one head, then its peak memory.
    g_fused_head = measure_head == "fused";
    for (Shape shape : kShapes) {
      if (std::find(only.begin(), only.end(), shape.name) == only.end()) continue;
      if (batch > 0) shape.batch = batch;
      if (seq > 0) shape.seq = seq;
      if (checkpointing) shape.checkpointing = true;
      const Measured measured = measure_meshrun(shape, warmup, steps, "");
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      // On a GPU the device's peak allocation is the memory that counts.
      const double peak_mb = on_gpu() ? peak_device_mb() : static_cast<double>(usage.ru_maxrss) / 1024.0;
      std::printf("step_s=%.6f tokens_per_s=%.3f peak_rss_mb=%.1f\n", measured.step_s, measured.tokens_per_s, peak_mb);
    }
    return 0;
  }
  if (compare_heads) {
    if (!shapes_given) only = {"2M", "2M-v128k"};
    for (const Shape& shape : kShapes) {
      if (std::find(only.begin(), only.end(), shape.name) == only.end()) continue;
      double fused_s = 0, unfused_s = 0, fused_mb = 0, unfused_mb = 0;
      for (int round = 0; round < rounds; ++round) {
        for (const std::string head : {"fused", "unfused"}) {
          std::string command = fmt::format("{} --baseline {} --measure-head {} --shape {} --threads {} --warmup {} "
                                            "--steps {} --chunk-mb {} --device {}",
                                            argv[0], script, head, shape.name, threads, warmup, steps, chunk_mb, device);
          if (batch > 0) command += fmt::format(" --batch {}", batch);
          if (seq > 0) command += fmt::format(" --seq {}", seq);
          if (checkpointing) command += " --checkpointing";
          const std::string output = run_and_capture(command);
          const double step_s = field(output, "step_s"), peak = field(output, "peak_rss_mb");
          double& best = head == "fused" ? fused_s : unfused_s;
          if (round == 0 || step_s < best) best = step_s;
          (head == "fused" ? fused_mb : unfused_mb) = std::max(head == "fused" ? fused_mb : unfused_mb, peak);
          std::printf("  round %d %s: %.4f s/step, peak %.0f MiB\n", round + 1, head.c_str(), step_s, peak);
        }
      }
      const double tokens = static_cast<double>((batch > 0 ? batch : shape.batch) * (seq > 0 ? seq : shape.seq));
      std::printf("%s heads: fused %.0f tokens/s, peak %.0f MiB; unfused %.0f tokens/s, peak %.0f MiB; fused "
                  "memory %.0f%% lower, speed %.2f×\n",
                  shape.name.c_str(), tokens / fused_s, fused_mb, tokens / unfused_s, unfused_mb,
                  100.0 * (1.0 - fused_mb / unfused_mb), unfused_s / fused_s);
    }
    return 0;
  }

  const double ceiling = matmul_gflops();
  const double python_ceiling = field(run_and_capture(fmt::format("{} {} --matmul --threads {} --device {}", python,
                                                                  script, threads, on_gpu() ? "cuda" : "cpu")),
                                      "gflops");
  std::printf("%s matmul (%s): meshrun/LibTorch %.1f GFLOP/s, Python %.1f GFLOP/s\n",
              on_gpu() ? "bf16" : "fp32", on_gpu() ? "8192², cuda:0" : fmt::format("1024², {} threads", threads).c_str(),
              ceiling, python_ceiling);
  const std::string torch_version = TORCH_VERSION;
  for (Shape shape : kShapes) {
    if (std::find(only.begin(), only.end(), shape.name) == only.end()) continue;
    if (batch > 0) shape.batch = batch;
    if (seq > 0) shape.seq = seq;
    if (checkpointing) shape.checkpointing = true;
    const std::string profile_path =
        profile ? (std::filesystem::temp_directory_path() / ("meshrun_train_profile_" + shape.name + ".json")).string()
                : "";
    // Compiled warm-up steps include compilation: a few more keep it out of
    // the timed ones (inductor's on-disk cache makes later rounds' short).
    const int compiled_warmup = warmup + 2;
    Measured native, eager, compiled;
    for (int round = 0; round < rounds; ++round) {
      const Measured mine = measure_meshrun_if_it_fits(shape, warmup, steps, round + 1 == rounds ? profile_path : "");
#ifdef MESHRUN_HAVE_CUDA
      // The baseline runs in another process on the same GPU: give it the
      // memory this process's caching allocator still holds.
      if (on_gpu()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
      const Measured theirs = measure_python(python, script, shape, threads, warmup, steps, false);
      const Measured theirs_compiled = skip_compile ? Measured{}
                                                    : measure_python(python, script, shape, threads, compiled_warmup,
                                                                     steps, true);
      keep_fastest(native, mine, round == 0);
      keep_fastest(eager, theirs, round == 0);
      keep_fastest(compiled, theirs_compiled, round == 0);
    }
    const double flops = step_flops(shape);
    // Each side's share of the matmul ceiling, or "-" where it did not fit.
    const auto share = [&](const Measured& m) {
      return m.fits ? fmt::format("{:.0f}%", 100 * flops / m.step_s / 1e9 / ceiling) : std::string("-");
    };
    const auto seconds = [](const Measured& m) {
      return m.fits ? fmt::format("{:.3f}", m.step_s) : std::string("-");
    };
    std::printf("%s: meshrun %s; torch %s eager %s (%s)", shape.name.c_str(), speed_of(native).c_str(),
                torch_version.c_str(), speed_of(eager).c_str(), ratio_of(native, eager).c_str());
    if (!skip_compile)
      std::printf("; torch %s compile %s (%s)", torch_version.c_str(), speed_of(compiled).c_str(),
                  ratio_of(native, compiled).c_str());
    std::printf(
        "\n  %lld params, d %lld, %lld layers, seq %lld, batch %lld, vocab %lld%s; fastest of %d rounds; s/step: "
        "meshrun %s, eager %s%s\n"
        "  meshrun %s of the matmul ceiling; eager %s%s\n",
        static_cast<long long>(native.params > 0 ? native.params : eager.params), static_cast<long long>(shape.hidden),
        static_cast<long long>(shape.layers), static_cast<long long>(shape.seq), static_cast<long long>(shape.batch),
        static_cast<long long>(shape.vocab), shape.checkpointing ? ", activation checkpointing" : "", rounds,
        seconds(native).c_str(), seconds(eager).c_str(),
        skip_compile ? "" : (", compile " + seconds(compiled)).c_str(), share(native).c_str(), share(eager).c_str(),
        skip_compile ? "" : ("; compile " + share(compiled)).c_str());
    if (on_gpu()) {
      std::printf("  bf16 MFU (model FLOPs / s over the measured bf16 matmul rate): meshrun %s, eager %s%s\n",
                  share(native).c_str(), share(eager).c_str(),
                  skip_compile ? "" : (", compile " + share(compiled)).c_str());
      // Peak of allocated device memory, whole run of the fastest round
      // (warm-up and, for compile, compilation included).
      std::printf("  peak device memory: meshrun %.0f MiB, eager %.0f MiB%s\n", native.peak_mb, eager.peak_mb,
                  skip_compile ? "" : fmt::format(", compile {:.0f} MiB (meshrun {:.2f}× of it)", compiled.peak_mb,
                                                  native.peak_mb / std::max(compiled.peak_mb, 1.0)).c_str());
    }
    if (native.fits && eager.fits && native.params != eager.params)
      std::printf("  WARNING: parameter counts differ (meshrun %lld, Python %lld)\n",
                  static_cast<long long>(native.params), static_cast<long long>(eager.params));
    if (profile) meshrun::bench::print_profile(profile_path, native.step_s, "step");
    std::fflush(stdout);
  }
  return 0;
} catch (const std::exception& error) {
  std::fprintf(stderr, "train_bench: %s\n", error.what());
  return 1;
}
