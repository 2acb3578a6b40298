// bench/sp: sequence parallelism against data parallelism on 2 ranks at a
// long sequence (issue #16).
//
// The same SFT job twice through the real `meshrun` binary: a Llama-shaped
// model (written here with random weights, max_position 4096), sequences
// of --length tokens from the byte tokenizer, the same global batch, one
// sequence per micro-step, and 2 local CPU workers laid out as dp 2 (each
// rank trains whole sequences) or sp 2 (every sequence split over both
// ranks, twice the micro-steps). Rounds interleave the layouts, since this
// machine's speed drifts over minutes. Per run: tokens/s (metrics.jsonl's,
// the median over the steps after the first) and the peak resident memory
// of the largest process of the job (wait4's rusage: the workers are
// meshrun's children and meshrun waits for them, so their peak reaches
// this process). Prints one line per run, then the medians and sp/dp ratios.
//
//   sp_bench --meshrun build/meshrun [--length 2048] [--rounds 2] [--steps 4]
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "meshrun/model/hf_model.hpp"

extern char** environ;

namespace fs = std::filesystem;

namespace {

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// A Llama shape small enough for two CPU workers at 2048 tokens, with the
// grouped-query attention the gathered K/V benefit from.
void write_model(const fs::path& directory, int64_t length) {
  meshrun::ModelOptions options;
  meshrun::ModelConfig& c = options.config;
  c.hidden = 256;
  c.layers = 4;
  c.heads = 8;
  c.kv_heads = 2;
  c.intermediate = 688;
  c.vocab = 512;
  c.max_position = std::max<int64_t>(4096, length);
  torch::manual_seed(1);
  meshrun::LlamaModel model(options);
  meshrun::save_hf_model(directory.string(), model);
}

// Prompt/response lines of random letters, each longer than `length`
// bytes so every sequence is truncated to exactly `length` tokens.
void write_data(const fs::path& file, int64_t length, int lines) {
  std::mt19937 random(7);
  std::uniform_int_distribution<int> letter('a', 'z');
  std::ofstream out(file);
  for (int line = 0; line < lines; ++line) {
    std::string input, output;
    for (int64_t i = 0; i < length / 4; ++i) input += static_cast<char>(letter(random));
    for (int64_t i = 0; i < length; ++i) output += static_cast<char>(letter(random));
    out << nlohmann::json{{"input", input}, {"output", output}}.dump() << "\n";
  }
}

void write_recipe(const fs::path& file, const fs::path& model, const fs::path& data, int64_t length, int batch) {
  std::ofstream out(file);
  out << fmt::format(R"(name = "sp-bench"
algorithm = "sft"
seed = 1
[launch]
type = "local"
procs_per_node = 2
device = "cpu"
backend = "gloo"
timeout_minutes = 30
[batch]
micro_train = 1
train = {}
[roles.actor]
model = "{}"
dtype = "fp32"
learning_rate = 1e-4
[data]
path = "{}"
tokenizer = "builtin:bytes"
input_key = "input"
output_key = "output"
max_len = {}
[logging]
steps = 1
)",
                     batch, model.string(), data.string(), length);
}

struct Measured {
  double tokens_per_s = 0;
  double peak_rss_mib = 0;
};

Measured run(const std::string& meshrun, const fs::path& recipe, const fs::path& directory, const std::string& mesh,
             int steps, int port) {
  fs::remove_all(directory);
  std::vector<std::string> args = {meshrun,
                                   recipe.string(),
                                   "--set", "logging.dir=" + directory.string(),
                                   "--set", "checkpoint.path=" + (directory / "checkpoints").string(),
                                   "--set", "checkpoint.output=" + (directory / "model").string(),
                                   "--set", "checkpoint.save_steps=-1",
                                   "--set", "train.max_steps=" + std::to_string(steps),
                                   "--set", "launch.master_port=" + std::to_string(port),
                                   "--set", mesh};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const fs::path log = directory.string() + ".log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  if (posix_spawn(&pid, meshrun.c_str(), &actions, nullptr, argv.data(), environ) != 0)
    throw std::runtime_error("cannot start " + meshrun);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  rusage usage{};
  if (wait4(pid, &status, 0, &usage) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("meshrun (" + mesh + ") failed; see " + log.string());
  std::vector<double> rates;
  std::ifstream metrics(directory / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto record = nlohmann::json::parse(line);
    if (record.at("step").get<int>() > 1) rates.push_back(record.at("tokens_per_s").get<double>());
  }
  if (rates.empty()) throw std::runtime_error("meshrun (" + mesh + ") logged no step after the first");
  return {median(rates), static_cast<double>(usage.ru_maxrss) / 1024.0};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"sequence parallelism vs data parallelism on 2 ranks at a long sequence"};
  std::string meshrun;
  int64_t length = 2048;
  int rounds = 2, steps = 4, port = 29731;
  std::string work;
  app.add_option("--meshrun", meshrun, "the meshrun binary")->required();
  app.add_option("--length", length, "tokens per sequence")->capture_default_str();
  app.add_option("--rounds", rounds, "interleaved rounds of both layouts")->capture_default_str();
  app.add_option("--steps", steps, "optimizer steps per run (the first is not timed)")->capture_default_str();
  app.add_option("--port", port, "the first rendezvous port (each run takes the next)")->capture_default_str();
  app.add_option("--work", work, "scratch directory (default: a new one under the temp directory)");
  CLI11_PARSE(app, argc, argv);
  if (length < 64 || length > 65536 || rounds < 1 || steps < 2)
    throw std::invalid_argument("--length 64..65536, --rounds ≥ 1, --steps ≥ 2");
  try {
    const fs::path root = work.empty() ? fs::temp_directory_path() / ("meshrun-sp-bench-" + std::to_string(getpid()))
                                       : fs::path(work);
    fs::create_directories(root);
    write_model(root / "model", length);
    const int batch = 4;
    write_data(root / "data.jsonl", length, batch * (steps + 1));
    write_recipe(root / "sft.toml", root / "model", root / "data.jsonl", length, batch);
    fmt::print("SFT at {} tokens, batch {} sequences, 2 CPU workers; {} rounds of {} steps\n", length, batch, rounds,
               steps);
    struct Layout {
      std::string name, mesh;
      std::vector<double> rates, peaks;
    };
    std::vector<Layout> layouts = {{"dp 2", "mesh.sp=1", {}, {}}, {"sp 2", "mesh.sp=2", {}, {}}};
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < layouts.size(); ++i) {
        Layout& layout = layouts[(i + static_cast<size_t>(round)) % layouts.size()];  // take turns going first
        const Measured m = run(meshrun, root / "sft.toml", root / ("run-" + std::to_string(round) + "-" + layout.mesh),
                               layout.mesh, steps, port++);
        layout.rates.push_back(m.tokens_per_s);
        layout.peaks.push_back(m.peak_rss_mib);
        fmt::print("round {} {}: {:.0f} tokens/s, peak RSS {:.0f} MiB per rank (largest)\n", round + 1, layout.name,
                   m.tokens_per_s, m.peak_rss_mib);
      }
    }
    const double dp_rate = median(layouts[0].rates), sp_rate = median(layouts[1].rates);
    const double dp_peak = median(layouts[0].peaks), sp_peak = median(layouts[1].peaks);
    fmt::print("dp 2: {:.0f} tokens/s, peak {:.0f} MiB per rank\n", dp_rate, dp_peak);
    fmt::print("sp 2: {:.0f} tokens/s ({:.2f}× dp 2), peak {:.0f} MiB per rank ({:.2f}× dp 2)\n", sp_rate,
               sp_rate / dp_rate, sp_peak, sp_peak / dp_peak);
    if (work.empty()) fs::remove_all(root);
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "sp_bench: " << error.what() << "\n";
    return 1;
  }
}
