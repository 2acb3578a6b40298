// One rank of a sequence-parallel model test, in a process of its own
// (tests/model/sequence_parallel_test.cpp starts 2 or 4).
//
//   sp_model_worker RANK WORLD PORT TIMEOUT_MS [DEVICE]
//
// Every rank builds the same model twice from one seed: whole (sp = 1) and
// sequence-parallel over the world group (sp = WORLD), for several configs
// (GQA untied; Qwen2 biases and tied; Mistral's sliding window; a value
// head; a Phi-3 critic with its window; gradient checkpointing) and inputs (plain, packed with positions,
// left-padded, a length the chunking must pad). The sp model's outputs for
// this rank's columns must equal the whole model's, and the sum over the sp
// ranks of each parameter's gradient (each rank's loss covers its columns)
// must equal the whole model's gradient, within 1e-5; gathered back along
// the row (whole_rows, gather_columns) the outputs equal the whole model's
// on every rank. Prints "rank R ok
// ..." and exits 0, or "error: ..." and exits 1.
//
// DEVICE cuda (the gpu suite): both models on CUDA device 0, shared by the
// ranks, so the CUDA path of sequence parallelism (the fused attention with
// a rectangular mask, the gathers and index maps on the device) runs on a
// one-GPU machine; the group stays Gloo, which takes CUDA tensors, because
// NCCL refuses two ranks on one device. fp32 on both sides, within 1e-4 (the
// fused kernels' summation order differs between whole and split rows).
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "meshrun/dist/dist.hpp"
#include "meshrun/model/model.hpp"

#include "../../support/loopback_launch.hpp"

// Named, not anonymous: the test programs compile as one unity build.
namespace sp_model_worker_code {

using namespace meshrun;

double g_tolerance = 1e-5;
torch::Device g_device = torch::kCPU;

double check_close(const torch::Tensor& got, const torch::Tensor& expected, const std::string& what) {
  if (got.sizes() != expected.sizes())
    throw std::runtime_error(what + ": shape " + c10::str(got.sizes()) + " vs " + c10::str(expected.sizes()));
  const double difference = got.numel() == 0 ? 0.0 : (got - expected).abs().max().item<double>();
  if (!(difference <= g_tolerance)) throw std::runtime_error(what + " differs by " + std::to_string(difference));
  return difference;
}

enum class Variant { gqa, qwen2, qwen3, sliding_window, value_head, phi3_value_head };

ModelOptions options_for(Variant variant, bool checkpointing) {
  ModelOptions options;
  ModelConfig& c = options.config;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.intermediate = 48;
  c.vocab = 40;
  c.max_position = 64;
  c.rms_norm_eps = 1e-5;
  if (variant == Variant::qwen2) {
    c.family = ModelFamily::qwen2;
    c.qkv_bias = true;
    c.tied_embeddings = true;
    c.rope_theta = 1e6;
  }
  if (variant == Variant::qwen3) {
    c.family = ModelFamily::qwen3;
    c.qk_norm = true;
    c.explicit_head_dim = 16;
  }
  if (variant == Variant::sliding_window) {
    c.family = ModelFamily::mistral;
    c.sliding_window = 3;
  }
  if (variant == Variant::value_head) options.head = ModelHead::value;
  if (variant == Variant::phi3_value_head) {
    c.family = ModelFamily::phi3;
    c.sliding_window = 3;
    options.head = ModelHead::value;
  }
  options.gradient_checkpointing = checkpointing;
  options.device = g_device;
  return options;
}

struct Batch {
  std::string name;
  ModelInputs inputs;
  torch::Tensor labels;  // -100: no loss
};

std::vector<Batch> batches() {
  std::vector<Batch> out;
  torch::manual_seed(9);
  {
    Batch b{"plain", {}, {}};
    b.inputs.input_ids = torch::randint(40, {2, 16}, torch::kInt64);
    b.labels = torch::randint(40, {2, 16}, torch::kInt64);
    out.push_back(b);
  }
  {
    // Two sequences in row 0 (the boundary inside a chunk), one in row 1;
    // 11 columns: the chunking pads the row.
    Batch b{"packed", {}, {}};
    b.inputs.input_ids = torch::randint(40, {2, 11}, torch::kInt64);
    b.inputs.sequence_ids = torch::tensor({0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1, -1},
                                          torch::kInt64)
                                .view({2, 11});
    b.inputs.position_ids =
        torch::tensor({0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0}, torch::kInt64).view({2, 11});
    b.labels = torch::randint(40, {2, 11}, torch::kInt64);
    b.labels[1][9] = -100;
    b.labels[1][10] = -100;
    b.labels[0][4] = -100;
    out.push_back(b);
  }
  {
    Batch b{"left-padded", {}, {}};
    b.inputs.input_ids = torch::randint(40, {2, 13}, torch::kInt64);
    b.inputs.attention_mask = torch::ones({2, 13}, torch::kInt64);
    b.inputs.attention_mask[1].narrow(0, 0, 5).zero_();
    b.labels = torch::randint(40, {2, 13}, torch::kInt64);
    b.labels[1].narrow(0, 0, 5).fill_(-100);
    out.push_back(b);
  }
  for (Batch& b : out) {
    for (torch::Tensor* t : {&b.inputs.input_ids, &b.inputs.position_ids, &b.inputs.sequence_ids,
                             &b.inputs.attention_mask, &b.labels})
      if (t->defined()) *t = t->to(g_device);
  }
  return out;
}

// Per-token loss [batch, columns]: cross-entropy for a language model, a
// squared error for a value head.
torch::Tensor token_loss(const torch::Tensor& out, const torch::Tensor& labels, bool value) {
  if (value) return (out - labels.clamp_min(0).to(out.dtype()) / 40.0).pow(2) * labels.ne(-100).to(out.dtype());
  return vocab_parallel_cross_entropy(out, labels, nullptr);
}

std::string check(Group& sp_group, Variant variant, bool checkpointing) {
  const bool value = variant == Variant::value_head || variant == Variant::phi3_value_head;
  ModelOptions options = options_for(variant, checkpointing);
  torch::manual_seed(5);
  LlamaModel whole(options);
  options.sequence_parallel = &sp_group;
  torch::manual_seed(5);
  LlamaModel split(options);
  if (split->sp_size() != sp_group.size()) throw std::runtime_error("sp_size");

  double outputs = 0, grads = 0;
  for (const Batch& batch : batches()) {
    whole->zero_grad();
    split->zero_grad();
    const int64_t length = batch.inputs.input_ids.size(1);
    const SequenceShard shard = split->sequence_shard(length, g_device);
    const torch::Tensor whole_out = whole->forward(batch.inputs);
    const torch::Tensor split_out = split->forward(batch.inputs);
    // Columns past the row's end are the chunking's padding, and a padding
    // query attends to nothing (its output is arbitrary): compare the rest.
    const torch::Tensor real = shard.local.lt(length);
    const torch::Tensor attended = batch.inputs.attention_mask.defined() ? batch.inputs.attention_mask
                                                                          : torch::ones_like(batch.inputs.input_ids);
    torch::Tensor keep = shard.take(attended, 0).to(torch::kFloat);
    if (!value) keep = keep.unsqueeze(-1);
    const torch::Tensor expected =
        (shard.take(whole_out.detach(), 0) * keep).index({torch::indexing::Slice(), real});
    outputs = std::max(outputs, check_close((split_out.detach() * keep).index({torch::indexing::Slice(), real}),
                                            expected, batch.name + " outputs"));
    // Gathered back along the row, every rank holds the whole model's outputs.
    torch::Tensor whole_keep = attended.to(torch::kFloat);
    if (!value) whole_keep = whole_keep.unsqueeze(-1);
    outputs = std::max(outputs, check_close(split->whole_rows(split_out.detach(), length) * whole_keep,
                                            whole_out.detach() * whole_keep, batch.name + " whole rows"));
    const torch::Tensor weights = torch::rand({batch.labels.size(0), length}).to(g_device);
    token_loss(whole_out, batch.labels, value).mul(weights).sum().backward();
    token_loss(split_out, shard.take(batch.labels, -100), value).mul(shard.take(weights, 0)).sum().backward();
    auto whole_parameters = whole->named_parameters();
    for (const auto& item : split->named_parameters()) {
      torch::Tensor grad = item.value().grad().clone();
      sp_group.all_reduce(grad);
      grads = std::max(grads, check_close(grad, whole_parameters[item.key()].grad(),
                                          batch.name + " gradient of " + item.key()));
    }
  }
  std::ostringstream out;
  out << "variant " << static_cast<int>(variant) << (checkpointing ? " checkpointed" : "") << " outputs " << outputs
      << " grads " << grads;
  return out.str();
}

// gather_columns inverts SequenceShard::take over the group, for 2-D and
// 3-D outputs and lengths the chunking pads; when every rank computes the
// same loss of the whole rows, each rank's columns get sp times its gradient.
void check_gather_columns(Group& group) {
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2, 11}, std::vector<int64_t>{3, 16, 5}}) {
    torch::manual_seed(21);
    const torch::Tensor full = torch::randn(shape).to(g_device);
    const torch::Tensor weights = torch::randn(shape).to(g_device);
    const SequenceShard shard = sequence_shard(shape[1], group.rank(), group.size(), g_device);
    const torch::Tensor local = shard.take(full, 0).requires_grad_(true);
    const torch::Tensor gathered = gather_columns(local, shard, &group);
    check_close(gathered.detach(), full, "gather_columns " + c10::str(shape));
    (gathered * weights).sum().backward();
    check_close(local.grad(), shard.take(weights, 0) * static_cast<double>(group.size()),
                "gather_columns gradient " + c10::str(shape));
  }
}

void check_shards(int sp) {
  // Zigzag: rank r holds chunks r and 2 sp - 1 - r; together every column once.
  for (int64_t length : {1, 7, 16, 33}) {
    std::vector<int64_t> seen;
    for (int rank = 0; rank < sp; ++rank) {
      const SequenceShard shard = sequence_shard(length, rank, sp, torch::kCPU);
      if (shard.padded % (2 * sp) != 0 || shard.padded < length) throw std::runtime_error("padding");
      if (shard.local.size(0) != shard.padded / sp) throw std::runtime_error("local size");
      const auto* local = shard.local.data_ptr<int64_t>();
      const int64_t chunk = shard.padded / (2 * sp);
      if (local[0] != rank * chunk || local[chunk] != (2 * sp - 1 - rank) * chunk)
        throw std::runtime_error("not head and tail chunks");
      seen.insert(seen.end(), local, local + shard.local.size(0));
    }
    std::sort(seen.begin(), seen.end());
    for (size_t i = 0; i < seen.size(); ++i)
      if (seen[i] != static_cast<int64_t>(i)) throw std::runtime_error("columns missing or repeated");
  }
}

int run(int argc, char** argv) {
  if (argc != 5 && !(argc == 6 && (std::string(argv[5]) == "cpu" || std::string(argv[5]) == "cuda"))) {
    std::cerr << "usage: sp_model_worker RANK WORLD PORT TIMEOUT_MS [cpu|cuda]\n";
    return 2;
  }
  if (argc == 6 && std::string(argv[5]) == "cuda") {
    g_device = torch::Device(torch::kCUDA, 0);
    g_tolerance = 1e-4;
  }
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]), port = std::atoi(argv[3]);
  try {
    torch::set_num_threads(1);
    DistOptions options;
    options.timeout = std::chrono::milliseconds(std::atoi(argv[4]));
    auto runtime = Runtime::init(test::loopback_launch(rank, world, port), options);
    Group& group = runtime->world();
    check_shards(world);
    check_gather_columns(group);
    std::ostringstream report;
    report << check(group, Variant::gqa, false) << "; " << check(group, Variant::qwen2, false) << "; "
           << check(group, Variant::qwen3, false) << "; "
           << check(group, Variant::sliding_window, false) << "; " << check(group, Variant::value_head, false) << "; "
           << check(group, Variant::phi3_value_head, false) << "; "
           << check(group, Variant::gqa, true);
    std::cout << "rank " << rank << " ok " << report.str() << std::endl;
    runtime->shutdown();
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace sp_model_worker_code

// The program's main (tests/support/worker_main.cpp).
int sp_model_worker_main(int argc, char** argv) { return sp_model_worker_code::run(argc, argv); }
