// One rank of a training-engine test job (tests/train/multiprocess_train_test.cpp
// starts two):
//
//   train_worker RANK WORLD PORT TIMEOUT_MS [sp]
//
// Every rank runs on 127.0.0.1 with MASTER_PORT = PORT. It first checks the
// asynchronous collectives, then trains builtin:tiny (fp32, seed 1234) for 5
// steps at a global batch of 4 sequences under each layout below, and rank 0
// prints, per layout, its loss curve and how far its final full weights are
// from those of one process trained on the whole batch:
//   layout NAME losses L1 L2 L3 L4 L5 weight_rel_diff D loss_rel_diff E worst PARAMETER
// ("single" is the one-process run itself, on every rank without talking to
// the other; "_packed" layouts pack two sequences per row, crossing chunk
// edges, and compare with "single_packed"). With "sp" only the sequence
// parallel layouts run, over the whole world (sp WORLD, e.g. 4 processes).
// Exit status 0 on success; 1 with "error: MESSAGE" otherwise.
#include <torch/torch.h>

#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "meshrun/dist/dist.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/train/train_engine.hpp"

#include "../../support/loopback_launch.hpp"

// Named, not anonymous: the test programs compile as one unity build.
namespace train_worker_code {

using namespace meshrun;

constexpr int kSteps = 5;
constexpr int kBatch = 4;
constexpr int kSeq = 8;

struct Layout {
  std::string name;
  bool dp = false;  // the world is the dp group
  bool tp = false;  // the world is the tp group
  int zero_stage = 0;
  int micro_steps = 1;
  bool checkpointing = false;
  bool offload = false;
  bool sp = false;  // the world is the sp group (and so the engine's replica group)
  bool packed = false;  // two sequences per row: columns [0, 3) and [3, kSeq)
};

void expect(bool condition, const std::string& what) {
  if (!condition) throw std::runtime_error("collective check failed: " + what);
}

void check_async_collectives(Group& world) {
  const int rank = world.rank(), size = world.size();
  at::Tensor summed = at::full({6}, static_cast<float>(rank + 1));
  PendingCollective reduce = world.all_reduce_async(summed);
  at::Tensor input = at::arange(2 * size, at::kFloat) * static_cast<float>(rank + 1);
  at::Tensor chunk = at::empty({2});
  PendingCollective scatter = world.reduce_scatter_async(input, chunk);
  at::Tensor gathered = at::zeros({3 * size});
  at::Tensor own = gathered.narrow(0, 3 * rank, 3);
  own.fill_(static_cast<float>(10 * rank));
  PendingCollective gather = world.all_gather_into_tensor_async(gathered, own);
  reduce.wait();
  scatter.wait();
  gather.wait();
  gather.wait();  // a second wait does nothing
  const float rank_sum = static_cast<float>(size * (size + 1) / 2);
  expect(summed.eq(rank_sum).all().item<bool>(), "all_reduce_async");
  expect(chunk.equal(at::arange(2 * rank, 2 * rank + 2, at::kFloat) * rank_sum), "reduce_scatter_async");
  for (int r = 0; r < size; ++r)
    expect(gathered.narrow(0, 3 * r, 3).eq(static_cast<float>(10 * r)).all().item<bool>(), "all_gather_async");
  bool refused = false;
  try {
    at::Tensor too_small = at::empty({1});
    world.all_gather_into_tensor_async(too_small, own);
  } catch (const DistError&) {
    refused = true;
  }
  expect(refused, "a wrongly sized all_gather output is refused");
  std::cout << "collectives ok" << std::endl;
}

struct Run {
  std::vector<double> losses;
  NamedTensors weights;
};

Run train(const Layout& layout, Group& world) {
  Group* dp = layout.dp ? &world : nullptr;
  Group* tp = layout.tp ? &world : nullptr;
  Group* sp = layout.sp ? &world : nullptr;
  Group* replicas = dp ? dp : sp;  // gradients are averaged over dp × sp
  const int dp_size = dp ? dp->size() : 1, dp_rank = dp ? dp->rank() : 0;
  ModelOptions model_options;
  model_options.config = *builtin_model_config("builtin:tiny");
  model_options.tensor_parallel = tp;
  model_options.sequence_parallel = sp;
  torch::manual_seed(1234);
  LlamaModel model(model_options);

  EngineOptions options;
  options.zero_stage = layout.zero_stage;
  options.adamw.weight_decay = 0.1;
  // Layouts sum gradients in different orders, so elements whose gradient
  // is nearly zero differ in their last bits, and Adam's m / sqrt(v) blows
  // that up to as much as a whole step (1e-4 relative at eps 1e-8). eps 1e-5
  // damps it below 1e-5 while leaving ordinary elements' updates as they are.
  options.adamw.eps = 1e-5;
  options.schedule = LrSchedule::make(LrScheduleKind::cosine, 3e-3, kSteps, 0.2, 0.1);
  options.max_norm = 0.5;
  options.bucket_mb = 0.05;  // several buckets
  options.gradient_checkpointing = layout.checkpointing;
  options.offload = layout.offload;
  TrainEngine engine(model, replicas, tp, options);

  Run run;
  const int64_t vocab = model_options.config.vocab;
  const int rows_per_rank = kBatch / dp_size, rows_per_micro = rows_per_rank / layout.micro_steps;
  for (int step = 0; step < kSteps; ++step) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(500 + step);
    const torch::Tensor tokens = torch::randint(vocab, {kBatch, kSeq + 1}, generator, torch::kInt64);
    double loss_sum = 0;
    for (int micro = 0; micro < layout.micro_steps; ++micro) {
      const int64_t first = dp_rank * rows_per_rank + micro * rows_per_micro;
      const torch::Tensor rows = tokens.narrow(0, first, rows_per_micro);
      ModelInputs inputs;
      inputs.input_ids = rows.narrow(1, 0, kSeq);
      torch::Tensor labels = rows.narrow(1, 1, kSeq).clone();
      if (layout.packed) {
        // The boundary falls inside a chunk at sp 2 and on a chunk edge at
        // sp 4; the first sequence's last token predicts nothing.
        inputs.sequence_ids = torch::tensor({0, 0, 0, 1, 1, 1, 1, 1}, torch::kInt64).expand({rows_per_micro, kSeq}).contiguous();
        inputs.position_ids = torch::tensor({0, 1, 2, 0, 1, 2, 3, 4}, torch::kInt64).expand({rows_per_micro, kSeq}).contiguous();
        labels.select(1, 2).fill_(-100);
      }
      const torch::Tensor logits = engine.forward(inputs);
      // With sp each rank's loss covers its columns: the sum over sp ranks
      // is the mean, and the engine's average over them is undone.
      const SequenceShard shard = model->sequence_shard(kSeq, torch::kCPU);
      const double tokens = static_cast<double>(rows_per_micro * (layout.packed ? kSeq - 1 : kSeq));
      torch::Tensor loss = vocab_parallel_cross_entropy(logits, shard.take(labels, -100), tp).sum() /
                           tokens / static_cast<double>(layout.micro_steps);
      loss_sum += sp ? dist::all_reduce_value(loss.item<double>(), ReduceOp::sum, sp) : loss.item<double>();
      engine.backward(sp ? loss * static_cast<double>(sp->size()) : loss, micro + 1 == layout.micro_steps);
    }
    const StepResult result = engine.step();
    if (result.skipped) throw std::runtime_error(layout.name + ": step " + std::to_string(step) + " was skipped");
    // The global batch's mean loss: the mean over dp ranks.
    run.losses.push_back(dp ? dist::all_reduce_value(loss_sum, ReduceOp::sum, dp) / dp_size : loss_sum);
  }
  run.weights = engine.gather_full_parameters();
  return run;
}

// The largest difference of any parameter, relative to that parameter's
// largest magnitude, and the parameter it occurs in.
std::pair<double, std::string> weight_rel_diff(const NamedTensors& got, const NamedTensors& expected) {
  if (got.size() != expected.size()) throw std::runtime_error("parameter sets differ");
  std::pair<double, std::string> worst{0.0, "-"};
  for (const auto& [name, tensor] : expected) {
    const auto found = got.find(name);
    if (found == got.end()) throw std::runtime_error("missing parameter " + name);
    if (!found->second.sizes().equals(tensor.sizes())) throw std::runtime_error("shape of " + name + " differs");
    const double scale = std::max(tensor.abs().max().item<double>(), 1e-12);
    const double diff = (found->second - tensor).abs().max().item<double>() / scale;
    if (diff > worst.first) worst = {diff, name};
  }
  return worst;
}

// Bytes behind a set of tensors, each storage once.
int64_t storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::set<const c10::StorageImpl*> seen;
  int64_t bytes = 0;
  for (const auto& tensor : tensors)
    if (seen.insert(tensor.storage().unsafeGetStorageImpl()).second)
      bytes += static_cast<int64_t>(tensor.storage().nbytes());
  return bytes;
}

// What a bf16 engine at dp = world holds after each backward of a step of
// two micro-steps, per ZeRO stage, and the most it held when a gradient
// was computed during backward (tests/train/multiprocess_train_test.cpp
// checks it against docs/planning.md's terms); a model of 6 layers, so
// that ZeRO-3 has units in flight while another's backward runs:
//   memory stage S numel N unit U after_backward B after_step A during_backward D
void report_gradient_memory(Group& world) {
  for (int stage = 0; stage <= 3; ++stage) {
    ModelOptions model_options;
    model_options.config = *builtin_model_config("builtin:tiny");
    model_options.config.layers = 6;
    model_options.dtype = torch::kBFloat16;
    torch::manual_seed(1234);
    LlamaModel model(model_options);
    int64_t numel = 0, unit = 0;
    for (const auto& item : model->named_parameters()) {
      numel += item.value().numel();
      if (item.key().rfind("model.layers.0.", 0) == 0) unit += item.value().numel();
    }
    EngineOptions options;
    options.zero_stage = stage;
    options.dtype = torch::kBFloat16;
    options.bucket_mb = 0.05;  // several buckets
    TrainEngine engine(model, &world, nullptr, options);
    int64_t after_backward = 0, during_backward = 0;
    for (auto& parameter : model->parameters())
      parameter.register_hook([&](const torch::Tensor&) {
        during_backward = std::max(during_backward, storage_bytes(engine.memory()));
        return torch::Tensor();
      });
    for (int micro = 0; micro < 2; ++micro) {
      auto generator = at::make_generator<at::CPUGeneratorImpl>(700 + micro + 10 * world.rank());
      const torch::Tensor rows =
          torch::randint(model_options.config.vocab, {2, kSeq + 1}, generator, torch::kInt64);
      ModelInputs inputs;
      inputs.input_ids = rows.narrow(1, 0, kSeq);
      const torch::Tensor logits = engine.forward(inputs);
      const torch::Tensor loss =
          vocab_parallel_cross_entropy(logits, rows.narrow(1, 1, kSeq).clone(), nullptr).to(torch::kFloat).mean();
      engine.backward(loss, micro == 1);
      after_backward = std::max(after_backward, storage_bytes(engine.memory()));
    }
    if (engine.step().skipped) throw std::runtime_error("memory probe: the step was skipped");
    if (world.rank() == 0)
      std::cout << "memory stage " << stage << " numel " << numel << " unit " << unit << " after_backward "
                << after_backward << " after_step " << storage_bytes(engine.memory()) << " during_backward "
                << during_backward << std::endl;
  }
}

int run(int rank, int world_size, int port, int timeout_ms, bool sp_only) {
  DistOptions dist_options;
  dist_options.timeout = std::chrono::milliseconds(timeout_ms);
  auto runtime = Runtime::init(test::loopback_launch(rank, world_size, port), dist_options);
  Group& world = runtime->world();
  check_async_collectives(world);

  const std::string sp_name = "sp" + std::to_string(world_size);
  const std::vector<Layout> all_layouts = {
      {"single"},
      {"dp2", true},
      {"dp2_zero1", true, false, 1},
      {"dp2_zero2", true, false, 2},
      {"dp2_zero3", true, false, 3},
      {"tp2", false, true},
      {"dp2_accum2", true, false, 0, 2},
      {"dp2_zero1_accum2", true, false, 1, 2},
      {"dp2_zero2_accum2", true, false, 2, 2},
      {"dp2_zero3_accum2", true, false, 3, 2},
      {"dp2_zero3_checkpointing", true, false, 3, 1, true},
      {"dp2_zero2_offload", true, false, 2, 1, false, true},
      {.name = "sp2", .sp = true},
      {.name = "sp2_zero3", .zero_stage = 3, .sp = true},
      {.name = "sp2_accum2_checkpointing", .micro_steps = 2, .checkpointing = true, .sp = true},
      {.name = "single_packed", .packed = true},
      {.name = "sp2_packed", .sp = true, .packed = true},
  };
  const std::vector<Layout> sp_layouts = {
      {"single"},
      {.name = sp_name, .sp = true},
      {.name = sp_name + "_zero3", .zero_stage = 3, .sp = true},
      {.name = "single_packed", .packed = true},
      {.name = sp_name + "_packed", .sp = true, .packed = true},
  };
  if (!sp_only) report_gradient_memory(world);
  Run reference, packed_reference;
  for (const auto& layout : sp_only ? sp_layouts : all_layouts) {
    const Run result = train(layout, world);
    if (layout.name == "single") reference = result;
    if (layout.name == "single_packed") packed_reference = result;
    const Run& expected = layout.packed ? packed_reference : reference;
    double loss_diff = 0;
    for (int step = 0; step < kSteps; ++step)
      loss_diff = std::max(loss_diff, std::abs(result.losses[step] - expected.losses[step]) /
                                          std::abs(expected.losses[step]));
    if (rank == 0) {
      std::cout << "layout " << layout.name << " losses" << std::setprecision(9);
      for (const double loss : result.losses) std::cout << ' ' << loss;
      const auto [weight_diff, worst_parameter] = weight_rel_diff(result.weights, expected.weights);
      std::cout << " weight_rel_diff " << weight_diff << " loss_rel_diff " << loss_diff << " worst "
                << worst_parameter << std::endl;
    }
  }
  runtime->shutdown();
  return 0;
}

int run(int argc, char** argv) {
  if (argc != 5 && !(argc == 6 && std::string(argv[5]) == "sp")) {
    std::cerr << "usage: train_worker RANK WORLD PORT TIMEOUT_MS [sp]\n";
    return 2;
  }
  try {
    return run(std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]), std::atoi(argv[4]), argc == 6);
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace train_worker_code

// The program's main (tests/support/worker_main.cpp).
int train_worker_main(int argc, char** argv) { return train_worker_code::run(argc, argv); }
