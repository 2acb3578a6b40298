// One rank of a tensor-parallel model test, in a process of its own
// (tests/model/tensor_parallel_test.cpp starts two).
//
//   model_worker RANK WORLD PORT TIMEOUT_MS DIR
//
// Every rank builds the same model twice from one seed: unsplit (tp = 1)
// and split over the world group (tp = WORLD), for several configs (GQA and
// untied; Qwen2 biases and tied; Qwen3's q/k norms and wide heads; Phi-3's
// fused files and sliding window; Gemma 2's soft-capping and mixed windows;
// Gemma 3's local rotary base and q/k norms;
// Qwen3-MoE with a dense layer and Mixtral,
// their routers' load-balancing loss in the backward; with gradient
// checkpointing). It checks
// that the split model's gathered weights equal the unsplit ones, and that
// logits, vocab-parallel cross-entropy, log-probs and every parameter's
// gradient (gathered) agree within 1e-5; then saves the split model into DIR
// and reloads it split and unsplit. Prints "rank R ok ..." and exits 0, or
// "error: ..." and exits 1.
#include <torch/torch.h>

#include <cstdlib>
#include <map>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "meshrun/dist/dist.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/model.hpp"

#include "../../support/loopback_launch.hpp"

// Named, not anonymous: the test programs compile as one unity build.
namespace model_worker_code {

using namespace meshrun;

constexpr double kTolerance = 1e-5;

void expect_close(const torch::Tensor& got, const torch::Tensor& expected, const std::string& what, double& worst) {
  if (got.sizes() != expected.sizes())
    throw std::runtime_error(what + ": shape " + c10::str(got.sizes()) + " vs " + c10::str(expected.sizes()));
  const double difference = (got - expected).abs().max().item<double>();
  worst = std::max(worst, difference);
  if (!(difference <= kTolerance))
    throw std::runtime_error(what + " differs by " + std::to_string(difference));
}

ModelConfig config_for(int variant) {
  ModelConfig c;
  c.hidden = 32;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.intermediate = 48;
  c.vocab = 40;
  c.max_position = 64;
  c.rms_norm_eps = 1e-5;
  if (variant == 1) {
    c.family = ModelFamily::qwen2;
    c.qkv_bias = true;
    c.tied_embeddings = true;
    c.rope_theta = 1e6;
  }
  if (variant == 2) {
    // Qwen3: per-head q/k norms, whose replicated weights get gradients
    // from each rank's own heads, and heads wider than hidden / heads.
    c.family = ModelFamily::qwen3;
    c.qk_norm = true;
    c.explicit_head_dim = 16;
  }
  if (variant == 3) {
    // Phi-3: its files fuse q/k/v and gate/up, which loading splits before
    // taking each rank's rows; a window shorter than the sequences.
    c.family = ModelFamily::phi3;
    c.sliding_window = 3;
  }
  if (variant == 4) {
    // Qwen3-MoE: layer 0 sparse (top-2 of 4 experts, renormalised), layer
    // 1 dense; the routers are replicated, each expert split like an MLP.
    c.family = ModelFamily::qwen3_moe;
    apply_family_layout(c);
    c.experts = 4;
    c.experts_per_token = 2;
    c.expert_intermediate = 16;
    c.norm_topk_prob = true;
    c.mlp_only_layers = {1};
  }
  if (variant == 5) {
    // Mixtral: w1/w3/w2 experts on every layer, weights always renormalised.
    c.family = ModelFamily::mixtral;
    c.experts = 3;
    c.experts_per_token = 2;
    c.intermediate = c.expert_intermediate = 24;
    c.norm_topk_prob = true;
  }
  if (variant == 6) {
    // Gemma 2: a window (3) on layer 0 only, soft-capped scores and logits,
    // norms × (1 + w), √hidden embeddings (over the vocab-parallel table), GeGLU.
    c.family = ModelFamily::gemma2;
    apply_family_layout(c);
    c.tied_embeddings = true;
    c.sliding_window = 3;
    c.windowed_layers = {true, false};
    c.attn_softcap = 1.5;
    c.final_softcap = 2.0;
    c.query_pre_attn_scalar = 12;
    c.hidden_act = "gelu_pytorch_tanh";
  }
  if (variant == 7) {
    // Gemma 3: per-head q/k norms × (1 + w) (replicated over tp), layer 0
    // local (window 3, rotary base 10000), layer 1 global (1e6, linear × 2).
    c.family = ModelFamily::gemma3_text;
    apply_family_layout(c);
    c.tied_embeddings = true;
    c.sliding_window = 3;
    c.windowed_layers = {true, false};
    c.rope_theta = 1e6;
    c.rope_scaling.type = RopeScaling::Type::linear;
    c.rope_scaling.factor = 2.0;
    c.window_rope_theta = 10000;
    c.query_pre_attn_scalar = 12;
    c.hidden_act = "gelu_pytorch_tanh";
  }
  return c;
}

torch::Tensor gathered(Group& group, const torch::Tensor& local, int split_dim) {
  if (split_dim < 0) return local;
  return torch::cat(group.all_gather(local.contiguous()), split_dim);
}

std::string check_variant(Group& group, int variant, bool checkpointing, const std::string& directory) {
  ModelOptions options;
  options.config = config_for(variant);
  options.gradient_checkpointing = checkpointing;
  torch::manual_seed(5);
  LlamaModel full(options);
  options.tensor_parallel = &group;
  torch::manual_seed(5);
  LlamaModel split(options);

  double weights = 0, logits_diff = 0, ce_diff = 0, grad_diff = 0;
  const auto full_state = gather_full_state(full);
  for (const auto& [name, tensor] : gather_full_state(split)) expect_close(tensor, full_state.at(name), "initial " + name, weights);

  // A packed batch: two sequences in row 0, one in row 1.
  torch::manual_seed(9);
  ModelInputs inputs;
  inputs.input_ids = torch::randint(40, {2, 9}, torch::kInt64);
  inputs.sequence_ids = torch::tensor({0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}, torch::kInt64).view({2, 9});
  inputs.position_ids = torch::tensor({0, 1, 2, 3, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 7, 8}, torch::kInt64).view({2, 9});
  torch::Tensor labels = torch::randint(40, {2, 9}, torch::kInt64);
  labels[0][3] = -100;
  const torch::Tensor token_weights = torch::rand({2, 9});

  const torch::Tensor full_logits = full->forward(inputs);
  const torch::Tensor split_logits = split->forward(inputs);
  if (split_logits.size(-1) != 40 / group.size()) throw std::runtime_error("split logits are not a vocab shard");
  expect_close(gathered(group, split_logits.detach(), 2), full_logits.detach(), "logits", logits_diff);

  const torch::Tensor full_loss = vocab_parallel_cross_entropy(full_logits, labels, nullptr);
  const torch::Tensor split_loss = vocab_parallel_cross_entropy(split_logits, labels, &group);
  expect_close(split_loss.detach(), full_loss.detach(), "cross-entropy", ce_diff);
  const torch::Tensor valid = labels.clamp_min(0);
  expect_close(vocab_parallel_log_probs(split_logits, valid, &group).detach(),
               vocab_parallel_log_probs(full_logits, valid, nullptr).detach(), "log-probs", ce_diff);

  expect_close(vocab_parallel_entropy(split_logits, &group).detach(),
               vocab_parallel_entropy(full_logits, nullptr).detach(), "entropy", ce_diff);
  // A mixture also back-propagates its routers' load-balancing loss.
  const auto with_aux = [](const LlamaModel& model, torch::Tensor loss) {
    const RouterStats stats = model->router_stats();
    return stats.aux_loss.defined() ? loss + 0.5 * stats.aux_loss : loss;
  };
  if (options.config.mixture_of_experts()) {
    double aux_diff = 0;
    expect_close(split->router_stats().aux_loss.detach(), full->router_stats().aux_loss.detach(), "aux loss", aux_diff);
  }
  with_aux(full, (full_loss * token_weights).sum()).backward();
  with_aux(split, (split_loss * token_weights).sum()).backward();
  auto full_parameters = full->named_parameters();
  auto split_parameters = split->named_parameters();
  for (const auto& spec : split->parameter_specs()) {
    const torch::Tensor grad = gathered(group, split_parameters[spec.name].grad(), spec.split_dim);
    expect_close(grad, full_parameters[spec.name].grad(), "gradient of " + spec.name, grad_diff);
  }

  // Saved from the split model, reloaded split and unsplit.
  const std::string saved = directory + "/variant-" + std::to_string(variant);
  save_hf_model(saved, split);
  ModelOptions load_options;
  load_options.tensor_parallel = &group;
  LlamaModel reloaded_split = load_hf_model(saved, load_options);
  LlamaModel reloaded_full = load_hf_model(saved, ModelOptions{});
  torch::NoGradGuard no_grad;
  if (!torch::equal(reloaded_split->forward(inputs), split_logits.detach()))
    throw std::runtime_error("reloaded split model gives other logits");
  if (!torch::equal(reloaded_full->forward(inputs), full_logits.detach()))
    throw std::runtime_error("reloaded unsplit model gives other logits");

  std::ostringstream out;
  out << "variant " << variant << (checkpointing ? " checkpointed" : "") << " logits " << logits_diff << " ce "
      << ce_diff << " grads " << grad_diff;
  return out.str();
}

// Expert parallelism over the group (variant 4: 4 experts, 2 per rank)
// against every expert on every rank: each rank routes its own batch; the
// same initial experts, the same logits and aux loss per rank, the same
// gradients of the non-expert parameters per rank and, for each expert a
// rank holds, the group's sum of the full model's gradients (its tokens
// come from every rank). Saved and reloaded, the model is whole.
std::string check_expert_parallel(Group& group, bool checkpointing, const std::string& directory) {
  ModelOptions options;
  options.config = config_for(4);
  options.config.mlp_only_layers.clear();  // both layers sparse
  options.gradient_checkpointing = checkpointing;
  torch::manual_seed(5);
  LlamaModel full(options);
  options.expert_parallel = &group;
  torch::manual_seed(5);
  LlamaModel split(options);
  if (split->parameter_specs().size() >= full->parameter_specs().size())
    throw std::runtime_error("the expert-parallel model holds every expert");

  double weights = 0, logits_diff = 0, grad_diff = 0, aux_diff = 0;
  auto full_parameters = full->named_parameters();
  auto split_parameters = split->named_parameters();
  for (const auto& spec : split->parameter_specs())
    expect_close(split_parameters[spec.name], full_parameters[spec.name], "initial " + spec.name, weights);

  torch::manual_seed(9 + group.rank());
  ModelInputs inputs;
  inputs.input_ids = torch::randint(40, {2, 7}, torch::kInt64);
  const torch::Tensor labels = torch::randint(40, {2, 7}, torch::kInt64);
  const torch::Tensor full_logits = full->forward(inputs);
  const torch::Tensor split_logits = split->forward(inputs);
  expect_close(split_logits.detach(), full_logits.detach(), "expert-parallel logits", logits_diff);
  expect_close(split->router_stats().aux_loss.detach(), full->router_stats().aux_loss.detach(), "aux loss", aux_diff);
  const auto loss = [&](const LlamaModel& model, const torch::Tensor& logits) {
    return vocab_parallel_cross_entropy(logits, labels, nullptr).sum() + 0.5 * model->router_stats().aux_loss;
  };
  loss(full, full_logits).backward();
  loss(split, split_logits).backward();
  // Every expert's gradient summed over the group, in the full model's
  // order (the same on both ranks).
  std::map<std::string, torch::Tensor> summed;
  for (const auto& spec : full->parameter_specs()) {
    if (spec.expert < 0) continue;
    summed[spec.name] = full_parameters[spec.name].grad().clone();
    group.all_reduce(summed[spec.name]);
  }
  for (const auto& spec : split->parameter_specs()) {
    const torch::Tensor expected = spec.expert >= 0 ? summed.at(spec.name) : full_parameters[spec.name].grad();
    expect_close(split_parameters[spec.name].grad(), expected, "gradient of " + spec.name, grad_diff);
  }

  const std::string saved = directory + "/expert-parallel";
  save_hf_model(saved, split);
  LlamaModel reloaded = load_hf_model(saved, ModelOptions{});
  torch::NoGradGuard no_grad;
  double reload_diff = 0;
  expect_close(reloaded->forward(inputs), full_logits.detach(), "reloaded expert-parallel model", reload_diff);

  // Experts that do not split evenly over the group are refused.
  options.config = config_for(5);  // 3 experts
  try {
    LlamaModel uneven(options);
  } catch (const ModelConfigError& error) {
    if (std::string(error.what()).find("is not divisible by the expert-parallel size 2") == std::string::npos)
      throw std::runtime_error(std::string("unexpected message: ") + error.what());
    std::ostringstream out;
    out << "expert parallel" << (checkpointing ? " checkpointed" : "") << " logits " << logits_diff << " aux "
        << aux_diff << " grads " << grad_diff;
    return out.str();
  }
  throw std::runtime_error("3 experts over ep 2 were accepted");
}

// The fused head on the tp=2 model (tied and untied, chunked to 3 rows,
// tempered, with an ignored label and the entropy) against the unfused
// head on the tp=1 model: values and gathered gradients.
std::string check_fused_head(Group& group) {
  double worst = 0;
  for (const bool tied : {false, true}) {
    ModelOptions options;
    options.config = config_for(0);
    options.config.tied_embeddings = tied;
    torch::manual_seed(5);
    LlamaModel full(options);
    options.tensor_parallel = &group;
    torch::manual_seed(5);
    LlamaModel split(options);
    torch::manual_seed(13);
    ModelInputs inputs;
    inputs.input_ids = torch::randint(40, {2, 9}, torch::kInt64);
    torch::Tensor labels = torch::randint(40, {2, 6}, torch::kInt64);
    labels[1][2] = -100;
    FusedHeadOptions fused;
    fused.temperature = 0.7;
    fused.entropy = true;
    fused.chunk_bytes = 3 * 4 * (40 / group.size());
    const HeadOutputs got = split->forward_log_probs(inputs, labels, fused, 2);
    const torch::Tensor logits = full->forward(inputs).narrow(1, 2, 6) / 0.7;
    const torch::Tensor ignored = labels.eq(-100);
    const torch::Tensor expected = vocab_parallel_log_probs(logits, labels.clamp_min(0), nullptr).masked_fill(ignored, 0);
    const torch::Tensor entropy = vocab_parallel_entropy(logits, nullptr);
    expect_close(got.log_probs.detach(), expected.detach(), "fused log-probs", worst);
    expect_close(got.entropy.detach(), entropy.detach(), "fused entropy", worst);
    const torch::Tensor weights = torch::rand({2, 6});
    (got.log_probs * weights + 0.3 * got.entropy).sum().backward();
    (expected * weights + 0.3 * entropy).sum().backward();
    auto full_parameters = full->named_parameters();
    auto split_parameters = split->named_parameters();
    for (const auto& spec : split->parameter_specs()) {
      const torch::Tensor grad = gathered(group, split_parameters[spec.name].grad(), spec.split_dim);
      expect_close(grad, full_parameters[spec.name].grad(), "fused gradient of " + spec.name, worst);
    }
    // SFT's summed loss, its gradients made in forward.
    full->zero_grad();
    split->zero_grad();
    torch::Tensor sft_labels = torch::randint(40, {2, 9}, torch::kInt64);
    sft_labels[0][5] = -100;
    FusedHeadOptions chunked;
    chunked.chunk_bytes = fused.chunk_bytes;
    const torch::Tensor split_sum = split->forward_loss_sum(inputs, sft_labels, chunked);
    const torch::Tensor full_sum = vocab_parallel_cross_entropy(full->forward(inputs), sft_labels, nullptr).sum();
    expect_close(split_sum.detach(), full_sum.detach(), "fused loss sum", worst);
    (split_sum * 0.25).backward();
    (full_sum * 0.25).backward();
    for (const auto& spec : split->parameter_specs()) {
      const torch::Tensor grad = gathered(group, split_parameters[spec.name].grad(), spec.split_dim);
      expect_close(grad, full_parameters[spec.name].grad(), "fused loss-sum gradient of " + spec.name, worst);
    }
  }
  std::ostringstream out;
  out << "fused head " << worst;
  return out.str();
}

// The split model's engine gathers vocab shards before sampling, so its
// tokens equal the unsplit model's.
std::string check_generation(Group& group) {
  ModelOptions options;
  options.config = config_for(0);
  torch::manual_seed(11);
  Generator full(LlamaModel(options), nullptr, 2, 24);
  options.tensor_parallel = &group;
  torch::manual_seed(11);
  Generator split(LlamaModel(options), &group, 2, 24);
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3}, {4, 5, 6, 7, 8, 9}, {10}};
  int compared = 0;
  for (double temperature : {0.0, 1.0}) {
    SamplingOptions sampling;
    sampling.temperature = temperature;
    sampling.top_p = 0.9;
    sampling.max_new_tokens = 12;
    sampling.seed = 3;
    const auto expected = full.generate(prompts, sampling);
    const auto got = split.generate(prompts, sampling);
    for (size_t i = 0; i < prompts.size(); ++i, ++compared)
      if (got[i].response != expected[i].response)
        throw std::runtime_error("tp generation differs from tp=1 for prompt " + std::to_string(i) +
                                 " at temperature " + std::to_string(temperature));
  }
  return "generation equal on " + std::to_string(compared) + " samples";
}

void check_divisibility_error(Group& group) {
  ModelOptions options;
  options.config = config_for(0);
  options.config.kv_heads = 1;
  options.tensor_parallel = &group;
  try {
    LlamaModel model(options);
  } catch (const ModelConfigError& error) {
    const std::string message = error.what();
    if (message.find("num_key_value_heads 1 is not divisible by the tensor-parallel size") == std::string::npos)
      throw std::runtime_error("unexpected message: " + message);
    return;
  }
  throw std::runtime_error("kv heads that do not split over tp were accepted");
}

int run(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: model_worker RANK WORLD PORT TIMEOUT_MS DIR\n";
    return 2;
  }
  const int rank = std::atoi(argv[1]), world = std::atoi(argv[2]), port = std::atoi(argv[3]);
  try {
    torch::set_num_threads(1);
    DistOptions options;
    options.timeout = std::chrono::milliseconds(std::atoi(argv[4]));
    auto runtime = Runtime::init(test::loopback_launch(rank, world, port), options);
    Group& group = runtime->world();
    std::ostringstream report;
    report << check_variant(group, 0, false, argv[5]) << "; " << check_variant(group, 1, false, argv[5]) << "; "
           << check_variant(group, 2, false, argv[5]) << "; " << check_variant(group, 3, false, argv[5]) << "; "
           << check_variant(group, 4, false, argv[5]) << "; " << check_variant(group, 5, false, argv[5]) << "; "
           << check_variant(group, 6, false, argv[5]) << "; " << check_variant(group, 7, false, argv[5]) << "; "
           << check_variant(group, 0, true, argv[5] + std::string("/checkpointed")) << "; "
           << check_variant(group, 4, true, argv[5] + std::string("/checkpointed")) << "; "
           << check_variant(group, 6, true, argv[5] + std::string("/checkpointed")) << "; "
           << check_variant(group, 7, true, argv[5] + std::string("/checkpointed")) << "; "
           << check_expert_parallel(group, false, argv[5]) << "; "
           << check_expert_parallel(group, true, argv[5] + std::string("/checkpointed")) << "; "
           << check_generation(group) << "; " << check_fused_head(group);
    check_divisibility_error(group);
    std::cout << "rank " << rank << " ok " << report.str() << std::endl;
    runtime->shutdown();
    return 0;
  } catch (const std::exception& error) {
    std::cerr << "error: " << error.what() << std::endl;
    return 1;
  }
}

}  // namespace model_worker_code

// The program's main (tests/support/worker_main.cpp).
int model_worker_main(int argc, char** argv) { return model_worker_code::run(argc, argv); }
