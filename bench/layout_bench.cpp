// bench/layout_bench: one SFT job under two mesh layouts of 2 ranks.
//
// --compare sp (issue #16): sequence parallelism against data parallelism
// at a long sequence: a Llama-shaped model, 2 local CPU workers laid out as
// dp 2 (each rank trains whole sequences) or sp 2 (every sequence split
// over both ranks, twice the micro-steps).
// --compare ep (issue #40): expert parallelism: a Qwen3-MoE-shaped model
// (8 experts, top 2, every layer sparse) at dp 2, its experts on both
// ranks (ep 1) or split between them (ep 2, tokens exchanged by all-to-all).
//
// The same job through the real `meshrun` binary each time: the model
// written here with random weights, sequences of --length tokens from the
// byte tokenizer, the same global batch, one sequence per micro-step.
// Rounds interleave the layouts, since this machine's speed drifts over
// minutes. Per run: tokens/s (metrics.jsonl's, the median over the steps
// after the first) and the peak resident memory of the largest process of
// the job (wait4's rusage: the workers are meshrun's children and meshrun
// waits for them, so their peak reaches this process). Prints one line per
// run, then the medians and the second layout's ratios to the first.
//
//   layout_bench --meshrun build/meshrun [--compare sp|ep] [--length 2048] [--rounds 2] [--steps 4]
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
// grouped-query attention the gathered K/V benefit from; or (moe) the same
// attention with a mixture of 8 experts of width 512 on every layer, whose
// experts are most of the weights, as in the MoE models users train.
void write_model(const fs::path& directory, int64_t length, bool moe) {
  meshrun::ModelOptions options;
  meshrun::ModelConfig& c = options.config;
  c.hidden = 256;
  c.layers = 4;
  c.heads = 8;
  c.kv_heads = 2;
  c.intermediate = 688;
  c.vocab = 512;
  if (moe) {
    c.family = meshrun::ModelFamily::qwen3_moe;
    meshrun::apply_family_layout(c);
    c.experts = 8;
    c.experts_per_token = 2;
    c.expert_intermediate = 512;
    c.norm_topk_prob = true;
  }
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
  out << fmt::format(R"(name = "layout-bench"
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
  CLI::App app{"one SFT job under two mesh layouts of 2 ranks: dp 2 against sp 2, or ep 1 against ep 2"};
  std::string meshrun;
  int64_t length = 2048;
  int rounds = 2, steps = 4, port = 29731;
  std::string work;
  std::string compare = "sp";
  app.add_option("--meshrun", meshrun, "the meshrun binary")->required();
  app.add_option("--compare", compare, "sp: dp 2 against sp 2; ep: ep 1 against ep 2 on a mixture of experts")
      ->check(CLI::IsMember({"sp", "ep"}))
      ->capture_default_str();
  app.add_option("--length", length, "tokens per sequence")->capture_default_str();
  app.add_option("--rounds", rounds, "interleaved rounds of both layouts")->capture_default_str();
  app.add_option("--steps", steps, "optimizer steps per run (the first is not timed)")->capture_default_str();
  app.add_option("--port", port, "the first rendezvous port (each run takes the next)")->capture_default_str();
  app.add_option("--work", work, "scratch directory (default: a new one under the temp directory)");
  CLI11_PARSE(app, argc, argv);
  if (length < 64 || length > 65536 || rounds < 1 || steps < 2)
    throw std::invalid_argument("--length 64..65536, --rounds ≥ 1, --steps ≥ 2");
  try {
    const fs::path root = work.empty() ? fs::temp_directory_path() / ("meshrun-layout-bench-" + std::to_string(getpid()))
                                       : fs::path(work);
    fs::create_directories(root);
    const bool moe = compare == "ep";
    write_model(root / "model", length, moe);
    const int batch = 4;
    write_data(root / "data.jsonl", length, batch * (steps + 1));
    write_recipe(root / "sft.toml", root / "model", root / "data.jsonl", length, batch);
    fmt::print("SFT{} at {} tokens, batch {} sequences, 2 CPU workers; {} rounds of {} steps\n",
               moe ? " of a mixture of 8 experts" : "", length, batch, rounds, steps);
    struct Layout {
      std::string name, mesh;
      std::vector<double> rates, peaks;
    };
    std::vector<Layout> layouts = moe ? std::vector<Layout>{{"ep 1", "mesh.ep=1", {}, {}}, {"ep 2", "mesh.ep=2", {}, {}}}
                                      : std::vector<Layout>{{"dp 2", "mesh.sp=1", {}, {}}, {"sp 2", "mesh.sp=2", {}, {}}};
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
    const Layout &first = layouts[0], &second = layouts[1];
    const double first_rate = median(first.rates), second_rate = median(second.rates);
    const double first_peak = median(first.peaks), second_peak = median(second.peaks);
    fmt::print("{}: {:.0f} tokens/s, peak {:.0f} MiB per rank\n", first.name, first_rate, first_peak);
    fmt::print("{}: {:.0f} tokens/s ({:.2f}× {}), peak {:.0f} MiB per rank ({:.2f}× {})\n", second.name, second_rate,
               second_rate / first_rate, first.name, second_peak, second_peak / first_peak, first.name);
    if (work.empty()) fs::remove_all(root);
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "layout_bench: " << error.what() << "\n";
    return 1;
  }
}
