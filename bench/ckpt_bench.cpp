// bench/ckpt: checkpoint save and load throughput of meshrun's training
// checkpoints against the disk itself, in one run on the same folder:
//   save: TrainingCheckpointer::save of a real engine state (fp32 master
//         weights and Adam moments of a Llama-style model, ~200 MB: write,
//         fsync, xxh3 checksums, manifest, rename) vs `dd bs=4M
//         conv=fsync` writing the same number of bytes;
//   load: resume (verify every checksum, read the rank file into tensors)
//         vs `dd` reading the file back, the page cache dropped before
//         each read when this process may (root), so both read the disk.
//   stall: how long training stops for a save, the snapshot of the state
//         included: synchronous (write, fsync, commit) vs [checkpoint]
//         async (snapshot into CPU memory; a background thread writes), and
//         the time of a training step while that background write runs vs
//         an undisturbed step.
// Medians of --repeats runs.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "meshrun/dist/dist.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/train/train_engine.hpp"
#include "meshrun/train/training_checkpoint.hpp"
#include "bench_support.hpp"

namespace {

using meshrun::bench::median;

namespace fs = std::filesystem;
using meshrun::train_detail::TrainingCheckpointer;

template <typename F>
double seconds_of(F&& work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

bool drop_page_cache() {
  std::fflush(nullptr);
  if (std::system("sync") != 0) return false;
  std::ofstream drop("/proc/sys/vm/drop_caches");
  if (!drop) return false;
  drop << "3\n";
  return static_cast<bool>(drop);
}

double run_shell(const std::string& command) {
  return seconds_of([&] {
    if (std::system(command.c_str()) != 0) throw std::runtime_error("failed: " + command);
  });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("meshrun checkpoint benchmark: save/load MB/s vs dd on the same disk");
  std::string folder = fs::temp_directory_path() / "meshrun_ckpt_bench";
  int repeats = 3;
  int64_t hidden = 512, layers = 4, vocab = 4096;  // ~17 M parameters: ~200 MB of state
  app.add_option("--dir", folder, "Folder on the disk to measure (emptied)");
  app.add_option("--repeats", repeats, "Runs per figure (median)");
  app.add_option("--layers", layers, "Model layers (state size grows with them)");
  CLI11_PARSE(app, argc, argv);
  fs::remove_all(folder);
  fs::create_directories(folder);

  meshrun::LaunchInfo launch;
  launch.launcher = "local";
  launch.rank = 0;
  launch.world_size = 1;
  launch.local_world_size = 1;
  launch.nodes = 1;
  launch.master_addr = "127.0.0.1";
  launch.master_port = 29000 + static_cast<int>(getpid() % 1000);
  meshrun::DistOptions dist_options;
  auto runtime = meshrun::Runtime::init(launch, dist_options);

  meshrun::ModelOptions model_options;
  model_options.config.hidden = hidden;
  model_options.config.layers = layers;
  model_options.config.heads = 8;
  model_options.config.kv_heads = 8;
  model_options.config.intermediate = 1408;
  model_options.config.vocab = vocab;
  model_options.config.tied_embeddings = false;
  meshrun::LlamaModel model(model_options);
  meshrun::EngineOptions engine_options;
  meshrun::TrainEngine engine(model, nullptr, nullptr, engine_options);
  const auto snapshot = [&] {
    meshrun::train_detail::RankState state;
    state.add_engine("actor", engine, model_options.config, meshrun::ModelHead::language_model, meshrun::Precision::fp32);
    state.add_rng_states(torch::kCPU);
    return state;
  };
  const meshrun::train_detail::RankState state = snapshot();
  int64_t bytes = 0;
  for (const auto& [name, tensor] : state.tensors) bytes += tensor.numel() * static_cast<int64_t>(tensor.element_size());
  meshrun::ModelInputs inputs;
  inputs.input_ids = torch::randint(vocab, {4, 128}, torch::kInt64);
  const auto train_step = [&] {
    engine.backward(engine.forward(inputs).logsumexp(-1).mean());
    engine.step();
  };

  meshrun::Recipe recipe;
  recipe.file = "bench";
  recipe.checkpoint.path = (fs::path(folder) / "checkpoints").string();
  recipe.checkpoint.keep_last = 1;
  TrainingCheckpointer checkpointer(meshrun::RunPlan::from_recipe(recipe), runtime->world(), "bench");
  const bool dropped = drop_page_cache();
  std::vector<double> save, load, dd_write, dd_read;
  const std::string dd_file = (fs::path(folder) / "dd.bin").string();
  const int64_t blocks = (bytes + (4 << 20) - 1) / (4 << 20);
  for (int i = 0; i < repeats; ++i) {
    save.push_back(seconds_of([&] { checkpointer.save(i + 1, state, nlohmann::json{{"step", i + 1}}); }));
    dd_write.push_back(run_shell(fmt::format("dd if=/dev/zero of={} bs=4M count={} conv=fsync status=none", dd_file, blocks)));
    drop_page_cache();
    load.push_back(seconds_of([&] {
      if (!checkpointer.resume()) throw std::runtime_error("no checkpoint to load");
    }));
    drop_page_cache();
    dd_read.push_back(run_shell(fmt::format("dd if={} of=/dev/null bs=4M status=none", dd_file)));
  }

  // Stalls: the same state saved at a step boundary, synchronously and in
  // the background, with the step that follows timed.
  meshrun::Recipe async_recipe = recipe;
  async_recipe.checkpoint.async = true;
  TrainingCheckpointer async_checkpointer(meshrun::RunPlan::from_recipe(async_recipe), runtime->world(), "bench");
  std::vector<double> plain_step, sync_stall, async_stall, step_during_write;
  train_step();  // warm-up
  for (int i = 0; i < repeats; ++i) {
    plain_step.push_back(seconds_of(train_step));
    sync_stall.push_back(seconds_of([&] { checkpointer.save(100 + i, snapshot(), nlohmann::json{{"step", i}}); }));
    async_stall.push_back(seconds_of([&] { async_checkpointer.save(200 + i, snapshot(), nlohmann::json{{"step", i}}); }));
    step_during_write.push_back(seconds_of(train_step));
    async_checkpointer.finish();
  }

  const double mb = static_cast<double>(bytes) / 1e6;
  fmt::print("state: {:.1f} MB (fp32 master weights and Adam moments, {} layers, d {}), {} runs, page cache {}\n", mb,
             layers, hidden, repeats, dropped ? "dropped before reads" : "NOT dropped (not root): reads may hit memory");
  fmt::print("save  {:8.1f} MB/s   dd write (conv=fsync) {:8.1f} MB/s   ratio {:.2f}\n", mb / median(save),
             mb / median(dd_write), median(dd_write) / median(save));
  fmt::print("load  {:8.1f} MB/s   dd read               {:8.1f} MB/s   ratio {:.2f}\n", mb / median(load),
             mb / median(dd_read), median(dd_read) / median(load));
  fmt::print("stall sync {:.3f} s   async {:.3f} s   ratio {:.1f}x less; training step {:.3f} s, {:.3f} s while the "
             "background write runs ({:.2f}x)\n",
             median(sync_stall), median(async_stall), median(sync_stall) / median(async_stall), median(plain_step),
             median(step_during_write), median(step_during_write) / median(plain_step));
  runtime->shutdown();
  fs::remove_all(folder);
  return 0;
}
