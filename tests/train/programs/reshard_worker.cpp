// One rank of the resharding test (tests/train/reshard_test.cpp starts two):
//
//   reshard_worker RANK WORLD PORT TIMEOUT_MS DIRECTORY
//
// For each source layout below, builtin:tiny (fp32, seed 1234) trains 2
// steps, every rank of the layout writes its rank file as a checkpoint does
// (local state, shard map and model in the metadata), the full state is
// gathered, and the engine trains a third step (the reference). Then every
// target layout loads the state from those rank files one parameter at a
// time (CheckpointReader::state_source, as a resharding resume does), and
// rank 0 prints
//   reshard SOURCE TARGET assembled_equal A loaded_equal L loss_rel_diff E weight_rel_diff W
// A: the whole reassembled state (CheckpointReader::full_state) equals the
// gathered one bit for bit (1/0); L: the target engine's own gathered state
// equals it too; E, W: the target's
// third step against the reference. Last, broken checkpoints (a dp rank's
// or a tp rank's file missing) must be refused:
//   refused CASE MESSAGE
// Exit status 0 on success; 1 with "error: MESSAGE" otherwise.
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/train/checkpoint_state.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/model/safetensors.hpp"
#include "meshrun/train/train_engine.hpp"
#include "meshrun/train/training_checkpoint.hpp"

// Named, not anonymous: the test programs compile as one unity build.
namespace reshard_worker_code {

using namespace meshrun;
namespace fs = std::filesystem;

constexpr int kBatch = 4;
constexpr int kSeq = 8;
constexpr int kSteps = 3;

struct Layout {
  std::string name;
  bool dp = false;  // the world is the dp group
  bool tp = false;  // the world is the tp group
  int zero_stage = 0;
  double bucket_mb = 0.05;
};

struct Trained {
  std::unique_ptr<TrainEngine> engine;
  LlamaModel model{nullptr};
};

Trained make_engine(const Layout& layout, Group& world) {
  ModelOptions model_options;
  model_options.config = *builtin_model_config("builtin:tiny");
  model_options.tensor_parallel = layout.tp ? &world : nullptr;
  torch::manual_seed(1234);
  Trained out;
  out.model = LlamaModel(model_options);
  EngineOptions options;
  options.zero_stage = layout.zero_stage;
  options.adamw.weight_decay = 0.1;
  options.adamw.eps = 1e-5;  // see train_worker.cpp
  options.schedule = LrSchedule::make(LrScheduleKind::cosine, 3e-3, kSteps, 0.2, 0.1);
  options.max_norm = 0.5;
  options.bucket_mb = layout.bucket_mb;
  out.engine = std::make_unique<TrainEngine>(out.model, layout.dp ? &world : nullptr, layout.tp ? &world : nullptr,
                                             options);
  return out;
}

// One optimizer step on the global batch of `step`; returns its mean loss.
double train_step(TrainEngine& engine, const Layout& layout, Group& world, int step) {
  Group* dp = layout.dp ? &world : nullptr;
  const int dp_size = dp ? dp->size() : 1, dp_rank = dp ? dp->rank() : 0;
  auto generator = at::make_generator<at::CPUGeneratorImpl>(700 + step);
  const torch::Tensor tokens = torch::randint(259, {kBatch, kSeq + 1}, generator, torch::kInt64);
  const int rows = kBatch / dp_size;
  const torch::Tensor mine = tokens.narrow(0, dp_rank * rows, rows);
  ModelInputs inputs;
  inputs.input_ids = mine.narrow(1, 0, kSeq);
  const torch::Tensor logits = engine.forward(inputs);
  torch::Tensor loss = vocab_parallel_cross_entropy(logits, mine.narrow(1, 1, kSeq), layout.tp ? &world : nullptr).mean();
  engine.backward(loss, true);
  engine.step();
  const double value = loss.item<double>();
  return dp ? dist::all_reduce_value(value, ReduceOp::sum, dp) / dp_size : value;
}

bool equal_states(const FullTrainingState& a, const FullTrainingState& b) {
  auto same = [](const NamedTensors& x, const NamedTensors& y) {
    if (x.size() != y.size()) return false;
    for (const auto& [name, tensor] : x) {
      auto found = y.find(name);
      if (found == y.end() || !found->second.sizes().equals(tensor.sizes()) || !found->second.equal(tensor)) return false;
    }
    return true;
  };
  return a.step == b.step && same(a.parameters, b.parameters) && same(a.exp_avg, b.exp_avg) &&
         same(a.exp_avg_sq, b.exp_avg_sq);
}

double weight_rel_diff(const NamedTensors& got, const NamedTensors& expected) {
  double worst = 0;
  for (const auto& [name, tensor] : expected) {
    const double scale = std::max(tensor.abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (got.at(name) - tensor).abs().max().item<double>() / scale);
  }
  return worst;
}

struct Source {
  FullTrainingState saved;
  double next_loss = 0;
  NamedTensors next_weights;
};

// Trains `layout` for two steps, writes its rank files into `directory`
// (ranks outside a single-process layout write none), and takes the third
// step as the reference.
Source save_source(const Layout& layout, Group& world, const fs::path& directory) {
  const bool single = !layout.dp && !layout.tp;
  Trained trained = make_engine(layout, world);
  for (int step = 0; step < 2; ++step) train_step(*trained.engine, layout, world, step);
  if (!single || world.rank() == 0) {
    train_detail::RankState state;
    state.add_engine("actor", *trained.engine, trained.model->options().config, ModelHead::language_model, Precision::fp32);
    const int rank = single ? 0 : world.rank();
    TensorList list(state.tensors.begin(), state.tensors.end());
    fs::create_directories(directory);
    write_safetensors((directory / rank_file_name(rank)).string(), list, state.metadata);
  }
  Source source;
  source.saved = trained.engine->gather_full_state();
  source.next_loss = train_step(*trained.engine, layout, world, 2);
  source.next_weights = trained.engine->gather_full_parameters();
  return source;
}

void expect_refused(const std::string& name, const fs::path& directory) {
  try {
    CheckpointReader reader(directory.string());
    reader.full_state("actor");
  } catch (const CheckpointError& error) {
    std::cout << "refused " << name << " " << error.what() << std::endl;
    return;
  }
  throw std::runtime_error(name + ": a broken checkpoint was accepted");
}

int run(int rank, int world_size, int port, int timeout_ms, const fs::path& directory) {
  LaunchInfo launch;
  launch.launcher = "local";
  launch.rank = launch.local_rank = rank;
  launch.world_size = launch.local_world_size = world_size;
  launch.master_addr = "127.0.0.1";
  launch.master_port = port;
  DistOptions dist_options;
  dist_options.timeout = std::chrono::milliseconds(timeout_ms);
  auto runtime = Runtime::init(launch, dist_options);
  Group& world = runtime->world();

  const std::vector<Layout> sources = {
      {"single"}, {"dp2", true}, {"dp2_zero1", true, false, 1}, {"dp2_zero2", true, false, 2},
      {"dp2_zero3", true, false, 3}, {"tp2", false, true},
  };
  std::vector<Layout> targets = sources;
  targets.push_back({"dp2_zero2_bucket1mb", true, false, 2, 1.0});
  for (const Layout& source_layout : sources) {
    const fs::path saved = directory / source_layout.name;
    const Source source = save_source(source_layout, world, saved);
    world.barrier();
    const CheckpointReader reader(saved.string());
    const FullTrainingState assembled = reader.full_state("actor");
    for (const Layout& target : targets) {
      Trained loaded = make_engine(target, world);
      loaded.engine->load_full_state(*reader.state_source("actor"));  // one parameter at a time, as a resume does
      const bool loaded_equal = equal_states(loaded.engine->gather_full_state(), assembled);
      const double loss = train_step(*loaded.engine, target, world, 2);
      const NamedTensors weights = loaded.engine->gather_full_parameters();
      if (rank == 0)
        std::cout << "reshard " << source_layout.name << " " << target.name << " assembled_equal "
                  << equal_states(assembled, source.saved) << " loaded_equal " << loaded_equal << " loss_rel_diff "
                  << std::setprecision(3) << std::abs(loss - source.next_loss) / std::abs(source.next_loss)
                  << " weight_rel_diff " << weight_rel_diff(weights, source.next_weights) << std::endl;
    }
  }
  world.barrier();
  if (rank == 0) {
    for (const char* name : {"dp2_zero2", "tp2"}) {
      const fs::path broken = directory / (std::string(name) + "_without_rank1");
      fs::create_directories(broken);
      fs::copy_file(directory / name / rank_file_name(0), broken / rank_file_name(0));
      expect_refused(std::string(name) + "_without_rank1", broken);
    }
    const fs::path gap = directory / "dp2_zero2_gap";
    fs::create_directories(gap);
    fs::copy_file(directory / "dp2_zero2" / rank_file_name(1), gap / rank_file_name(0));  // dp rank 1 alone
    expect_refused("dp2_zero2_only_dp_rank1", gap);
  }
  runtime->shutdown();
  return 0;
}

int run(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: reshard_worker RANK WORLD PORT TIMEOUT_MS DIRECTORY\n";
    return 2;
  }
  try {
    return run(std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), argv[5]);
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace reshard_worker_code

// The program's main (tests/support/worker_main.cpp).
int reshard_worker_main(int argc, char** argv) { return reshard_worker_code::run(argc, argv); }
