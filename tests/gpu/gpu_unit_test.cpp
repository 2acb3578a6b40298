// GPU code paths on one device: the model's fused attention
// (scaled_dot_product_attention) against the CPU computation, generation
// with the KV cache equal to recomputation on CUDA, decode steps replayed
// from CUDA graphs equal to eager ones, [colocate] sleep giving
// device memory back to the driver, the CUDA random state round trip of
// checkpoints, RMSNorm's and AdamW's fused CUDA kernels and the fused LM head
// against the CPU's, meshrun's own kernels (SwiGLU, the in-place rotary,
// residual add + RMSNorm) against the CPU and a model with them against one
// without,
// and sequence parallelism's CUDA path (two sp ranks as processes sharing
// the GPU). Runs only where a GPU is visible (gpu_main.cpp).
#include "tests/dist/torch_doctest.hpp"

#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>

#include "meshrun/rollout/generation.hpp"
#include "meshrun/model/model.hpp"
#include "meshrun/sft/sft_batch.hpp"
#include "meshrun/train/optimizer.hpp"
#include "meshrun/train/train_engine.hpp"
#include "meshrun/train/storage_sleep.hpp"
#include "meshrun/model/paged_kv_cache.hpp"
#include "model/model_fixtures.hpp"
#include "src/model/fused_kernels.hpp"
#include "src/model/layers.hpp"
#include "src/rollout/decode_graphs.hpp"
#include "support/worker_process.hpp"
#include "test_program_paths.hpp"

using namespace meshrun;

namespace {

LlamaModel make_model(torch::Device device, torch::Dtype dtype) {
  ModelOptions options;
  options.config = model_test::small_config();
  options.config.initializer_range = 0.3;
  options.config.max_position = 128;
  options.device = device;
  options.dtype = dtype;
  torch::manual_seed(17);
  return LlamaModel(options);
}

ModelInputs on_gpu(const ModelInputs& inputs) {
  ModelInputs moved;
  for (auto [from, to] : {std::pair{&inputs.input_ids, &moved.input_ids}, {&inputs.position_ids, &moved.position_ids},
                          {&inputs.sequence_ids, &moved.sequence_ids}, {&inputs.attention_mask, &moved.attention_mask}})
    if (from->defined()) *to = from->cuda();
  return moved;
}

const std::vector<std::vector<int32_t>> kPrompts = {{5, 6, 7}, {8, 9, 10, 11, 12, 13, 14}, {1}, {2, 3}};

}  // namespace

TEST_CASE("fused CUDA attention gives the CPU model's logits (padding and packing included)") {
  LlamaModel cpu = make_model(torch::kCPU, torch::kFloat32);
  LlamaModel gpu = make_model(torch::Device(torch::kCUDA, 0), torch::kFloat32);
  ModelInputs inputs;
  torch::manual_seed(3);
  inputs.input_ids = torch::randint(0, 48, {3, 40}, torch::kInt64);
  inputs.attention_mask = torch::ones({3, 40}, torch::kInt64);
  inputs.attention_mask.index_put_({0, torch::indexing::Slice(0, 7)}, 0);  // left padding
  inputs.sequence_ids = torch::zeros({3, 40}, torch::kInt64);
  inputs.sequence_ids.index_put_({2, torch::indexing::Slice(18, torch::indexing::None)}, 1);  // two packed samples
  const torch::Tensor expected = cpu->forward(inputs);
  const torch::Tensor actual = gpu->forward(on_gpu(inputs)).cpu();
  // Only real (unpadded) positions carry meaning.
  const torch::Tensor real = inputs.attention_mask.ne(0).unsqueeze(-1);
  const double difference = (actual - expected).abs().masked_select(real).max().item<double>();
  CAPTURE(difference);
  CHECK(difference < 2e-3);  // TF32 may serve fp32 products on the GPU
}

TEST_CASE("bf16 on CUDA stays within bf16 tolerance of the fp32 CPU model") {
  LlamaModel cpu = make_model(torch::kCPU, torch::kFloat32);
  LlamaModel gpu = make_model(torch::Device(torch::kCUDA, 0), torch::kBFloat16);
  ModelInputs inputs;
  torch::manual_seed(4);
  inputs.input_ids = torch::randint(0, 48, {2, 32}, torch::kInt64);
  const torch::Tensor expected = torch::log_softmax(cpu->forward(inputs), -1);
  const torch::Tensor actual = torch::log_softmax(gpu->forward(on_gpu(inputs)).to(torch::kFloat32), -1).cpu();
  const double difference = (actual - expected).abs().mean().item<double>();
  CAPTURE(difference);
  CHECK(difference < 5e-2);
}

TEST_CASE("on CUDA, generation with the KV cache equals recomputing the prefix") {
  Generator generator(make_model(torch::Device(torch::kCUDA, 0), torch::kFloat32), nullptr, 8, 40);
  SamplingOptions options;
  options.temperature = 0.0;
  options.max_new_tokens = 16;
  options.seed = 9;
  const auto cached = generator.generate(kPrompts, options, true);
  const auto recomputed = generator.generate(kPrompts, options, false);
  REQUIRE(cached.size() == recomputed.size());
  for (size_t i = 0; i < cached.size(); ++i) {
    CAPTURE(i);
    CHECK(cached[i].response == recomputed[i].response);
  }
}

TEST_CASE("on CUDA, a tight paged pool (shared prefixes, chunked prefill, preemption) gives a roomy pool's tokens") {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& prompt : kPrompts)
    for (int k = 0; k < 3; ++k) prompts.push_back(prompt);
  SamplingOptions options;
  options.temperature = 0.0;
  options.max_new_tokens = 14;
  Generator roomy(make_model(torch::Device(torch::kCUDA, 0), torch::kFloat32), nullptr, 16, 40);
  const auto expected = roomy.generate(prompts, options);
  CHECK(roomy.stats().preemptions == 0);
  // 32 tokens in blocks of 4, chunks of 3: preempts, forks partial blocks.
  Generator cuda(make_model(torch::Device(torch::kCUDA, 0), torch::kFloat32), nullptr, 16, 40, 32, 4, 3);
  const auto samples = cuda.generate(prompts, options);
  CHECK(cuda.stats().preemptions > 0);
  CHECK(cuda.stats().prefix_shared_tokens > 0);
  CHECK(cuda.kv_pool().free_blocks() == cuda.kv_pool().total_blocks());
  for (size_t i = 0; i < prompts.size(); ++i) {
    CAPTURE(i);
    CHECK(samples[i].response == expected[i].response);
  }
}

TEST_CASE("on CUDA, decode steps replayed from CUDA graphs give eager steps' tokens; sleep releases them, waking recaptures") {
  std::vector<std::vector<int32_t>> prompts;
  for (const auto& prompt : kPrompts)
    for (int k = 0; k < 3; ++k) prompts.push_back(prompt);
  const torch::Device device(torch::kCUDA, 0);
  for (const double temperature : {0.0, 1.0}) {
    CAPTURE(temperature);
    SamplingOptions options;
    options.temperature = temperature;
    options.top_k = 25;
    options.max_new_tokens = 14;
    options.seed = 5;
    Generator eager(make_model(device, torch::kFloat32), nullptr, 6, 40, 32, 4);
    const auto expected = eager.generate(prompts, options);
    // Six live in a tight pool: batch buckets 1, 2, 4 and 6, preemption.
    Generator graphed(make_model(device, torch::kFloat32), nullptr, 6, 40, 32, 4, 3, true);
    const auto samples = graphed.generate(prompts, options);
    const rollout_detail::DecodeGraphs& graphs = *graphed.decode_graphs();
    CHECK(graphs.captures() >= 2);
    CHECK(graphs.graphs() == graphs.captures());
    CHECK(graphs.replays() == graphed.stats().graph_steps);
    for (size_t i = 0; i < prompts.size(); ++i) {
      CAPTURE(i);
      CHECK(samples[i].response == expected[i].response);
    }
    // A second call replays what the first captured.
    const int64_t captured = graphs.captures(), replayed = graphs.replays();
    graphed.generate(prompts, options);
    CHECK(graphs.captures() == captured);
    CHECK(graphs.replays() > replayed);
    // Sleep lets the graphs go before it moves the weights and cache; the
    // next call captures anew at the new addresses and samples the same.
    StorageSleep sleeper;
    sleeper.add(graphed.memory());
    sleeper.before_sleep([&] { graphed.release_decode_graphs(); });
    sleeper.sleep();
    CHECK(graphs.graphs() == 0);
    sleeper.wake();
    const auto woken = graphed.generate(prompts, options);
    CHECK(graphs.captures() > captured);
    for (size_t i = 0; i < prompts.size(); ++i) CHECK(woken[i].response == expected[i].response);
  }
  // bf16: a replayed step's logits are the eager step's within bf16's
  // rounding (the graph attends over a wider, masked key width).
  torch::NoGradGuard no_grad;
  LlamaModel model = make_model(device, torch::kBFloat16);
  PagedKvCache cache(*model, 9, 4);
  KvBlockTable a, b;
  a.blocks = {3, 1, 6};
  a.tokens = 10;
  b.blocks = {2};
  b.tokens = 3;
  const auto ids = torch::TensorOptions().dtype(torch::kInt64).device(device);
  torch::manual_seed(8);
  model->forward_paged(torch::randint(1, 40, {1, 9}, ids), {0}, torch::tensor({3, 1, 6, 0}, ids).view({1, 4}), cache);
  model->forward_paged(torch::randint(1, 40, {1, 2}, ids), {0}, torch::tensor({2, 0, 0, 0}, ids).view({1, 4}), cache);
  rollout_detail::DecodeGraphs graphs(3, 4, 8);
  for (int round = 0; round < 2; ++round) {  // captured, then replayed
    const torch::Tensor replayed = graphs.step(*model, cache, {7, 9}, {9, 2}, {&a, &b}).to(torch::kFloat);
    const torch::Tensor eager =
        model->forward_paged(torch::tensor({7, 9}, ids).view({2, 1}), {9, 2},
                             torch::tensor({3, 1, 6, 0, 2, 0, 0, 0}, ids).view({2, 4}), cache)
            .to(torch::kFloat);
    const double difference =
        (torch::log_softmax(replayed, -1) - torch::log_softmax(eager, -1)).abs().max().item<double>();
    CAPTURE(difference);
    CHECK(difference < 5e-2);
  }
  CHECK(graphs.captures() == 1);
  CHECK(graphs.replays() == 2);
}

TEST_CASE("colocate sleep gives the device memory back and restores the bytes") {
  const torch::Device device(torch::kCUDA, 0);
  torch::Tensor weights = torch::randn({64, 1024, 1024}, torch::TensorOptions().device(device));  // 256 MiB
  const torch::Tensor copy = weights.cpu();
  StorageSleep sleeper;
  sleeper.add(weights);
  const int64_t before = StorageSleep::device_reserved_bytes(device);
  const int64_t released = sleeper.sleep();
  const int64_t after = StorageSleep::device_reserved_bytes(device);
  CHECK(released == weights.numel() * 4);
  CAPTURE(before);
  CAPTURE(after);
  CHECK(before - after >= released);
  sleeper.wake();
  CHECK(torch::equal(weights.cpu(), copy));
}

TEST_CASE("the CUDA generator's state restores the same random numbers") {
  const torch::Device device(torch::kCUDA, 0);
  auto generator = at::globalContext().defaultGenerator(device);
  const torch::Tensor state = generator.get_state();
  const torch::Tensor first = torch::rand({16}, torch::TensorOptions().device(device)).cpu();
  generator.set_state(state);
  const torch::Tensor again = torch::rand({16}, torch::TensorOptions().device(device)).cpu();
  CHECK(torch::equal(first, again));
}

TEST_CASE("RMSNorm on CUDA (LibTorch's fused kernels) gives the CPU's values and gradients, fp32 and bf16") {
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(29);
  const torch::Tensor x_values = torch::randn({3, 37, 300}) * 3;
  const torch::Tensor weight_values = torch::rand({300}) + 0.5;
  const torch::Tensor grad_out = torch::randn({3, 37, 300});
  const torch::Tensor x = x_values.clone().requires_grad_(true);
  const torch::Tensor weight = weight_values.clone().requires_grad_(true);
  const torch::Tensor out = model_detail::rms_norm(x, weight, 1e-6);
  const auto grads = torch::autograd::grad({out}, {x, weight}, {grad_out});
  for (const auto& [dtype, tolerance] : {std::pair{torch::kFloat, 1e-4}, {torch::kBFloat16, 4e-2}}) {
    CAPTURE(std::string(c10::toString(dtype)));
    const auto on_device = torch::TensorOptions().device(device).dtype(dtype);
    const torch::Tensor x_gpu = x_values.to(on_device).requires_grad_(true);
    const torch::Tensor weight_gpu = weight_values.to(on_device).requires_grad_(true);
    const torch::Tensor out_gpu = model_detail::rms_norm(x_gpu, weight_gpu, 1e-6);
    CHECK((out_gpu.scalar_type() == dtype));
    const auto grads_gpu = torch::autograd::grad({out_gpu}, {x_gpu, weight_gpu}, {grad_out.to(on_device)});
    const auto relative = [](const torch::Tensor& got, const torch::Tensor& want) {
      return ((got.cpu().to(torch::kFloat) - want).abs().max() / want.abs().max()).item<double>();
    };
    CHECK(relative(out_gpu, out) < tolerance);
    CHECK(relative(grads_gpu[0], grads[0]) < tolerance);
    CHECK(relative(grads_gpu[1], grads[1]) < tolerance);
    // A frozen weight (a LoRA base): the input's gradient alone.
    const torch::Tensor frozen = model_detail::rms_norm(x_gpu, weight_values.to(on_device), 1e-6);
    CHECK(relative(torch::autograd::grad({frozen}, {x_gpu}, {grad_out.to(on_device)})[0], grads[0]) < tolerance);
  }
}

TEST_CASE("AdamW on CUDA (LibTorch's fused kernel) follows the CPU step: decay runs, multiplier, steps") {
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(23);
  const int64_t numel = 1'000'003;
  const ElementRanges decaying = {{600'000, 900'000}, {11, 300'001}};
  const torch::Tensor initial = torch::randn({numel});
  AdamWOptions options;
  options.weight_decay = 0.1;
  auto cpu = AdamWShard::for_params(initial.clone(), decaying);
  auto gpu = AdamWShard::for_params(initial.to(device), decaying);
  for (int step = 1; step <= 4; ++step) {
    const torch::Tensor grad = torch::randn({numel});
    const double multiplier = step == 2 ? 1.0 : 0.3 * step;
    adamw_step(cpu, grad, options, 1e-3, step, multiplier);
    adamw_step(gpu, grad.to(device), options, 1e-3, step, multiplier);
  }
  CHECK(torch::allclose(gpu.params.cpu(), cpu.params, 1e-5, 1e-6));
  CHECK(torch::allclose(gpu.exp_avg.cpu(), cpu.exp_avg, 1e-5, 1e-7));
  CHECK(torch::allclose(gpu.exp_avg_sq.cpu(), cpu.exp_avg_sq, 1e-5, 1e-9));
  CHECK_FALSE(torch::allclose(gpu.params.cpu(), initial));
}

// The sp model worker of the model tests (tests/model/programs) on CUDA:
// whole and sequence-parallel models on the one GPU, the two ranks over
// Gloo (NCCL refuses two ranks on one device). MESHRUN_SP_MODEL_WORKER_PROGRAM
// in the environment names the program where the build folder is elsewhere
// (scripts/device.sh's prebuilt programs).
TEST_CASE("sequence parallelism on CUDA (sp 2): outputs and gradients equal the whole sequence's") {
  const char* from_environment = std::getenv("MESHRUN_SP_MODEL_WORKER_PROGRAM");
  const std::string program = from_environment && *from_environment ? from_environment : MESHRUN_SP_MODEL_WORKER_PROGRAM;
  const int port = test::free_loopback_port();
  std::vector<std::unique_ptr<test::WorkerProcess>> ranks;
  for (int rank = 0; rank < 2; ++rank)
    ranks.push_back(std::make_unique<test::WorkerProcess>(
        std::vector<std::string>{program, std::to_string(rank), "2", std::to_string(port), "60000", "cuda"}));
  for (auto& rank : ranks) {
    CHECK_MESSAGE(rank->wait(std::chrono::seconds(180)) == 0, rank->output());
    const std::string output = rank->output();
    MESSAGE(output);
    CHECK_MESSAGE(output.find(" ok variant 0 outputs ") != std::string::npos, output);
  }
}

TEST_CASE("the fused LM head on CUDA gives the CPU's log-probs, entropy, loss sum and gradients (fp32 and bf16)") {
  for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
    CAPTURE(dtype);
    const double tolerance = dtype == torch::kFloat ? 1e-4 : 3e-2;
    torch::manual_seed(3);
    const torch::Tensor hidden = torch::randn({4, 9, 32});
    const torch::Tensor weight = torch::randn({96, 32}) * 0.3;
    torch::Tensor labels = torch::randint(96, {4, 9}, torch::kInt64);
    labels[1][3] = -100;
    FusedHeadOptions options;
    options.entropy = true;
    options.temperature = 0.8;
    options.chunk_bytes = 5 * 4 * 96;  // chunks of 5 rows: recomputed in backward
    const auto run = [&](torch::Device device) {
      torch::Tensor h = hidden.to(device, dtype).requires_grad_(), w = weight.to(device, dtype).requires_grad_();
      const HeadOutputs out = fused_head(h, w, labels.to(device), nullptr, options);
      const torch::Tensor loss = fused_head_loss_sum(h, w, labels.to(device), nullptr, options);
      (out.log_probs.sum() + 0.5 * out.entropy.sum() + 0.25 * loss).backward();
      return std::vector<torch::Tensor>{out.log_probs.detach().cpu().to(torch::kFloat),
                                        out.entropy.detach().cpu().to(torch::kFloat),
                                        loss.detach().cpu().to(torch::kFloat), h.grad().cpu().to(torch::kFloat),
                                        w.grad().cpu().to(torch::kFloat)};
    };
    const auto cpu = run(torch::kCPU), gpu = run(torch::Device(torch::kCUDA, 0));
    for (size_t i = 0; i < cpu.size(); ++i) {
      CAPTURE(i);
      const double scale = std::max(1.0, cpu[i].abs().max().item<double>());
      CHECK((gpu[i] - cpu[i]).abs().max().item<double>() / scale < tolerance);
    }
  }
}

// ---- meshrun's own CUDA kernels (src/model/fused_kernels.hpp) against the CPU ----

namespace {

double relative_to(const torch::Tensor& got, const torch::Tensor& want) {
  const double scale = std::max(1e-6, want.abs().max().item<double>());
  return (got.detach().cpu().to(torch::kFloat) - want.to(torch::kFloat)).abs().max().item<double>() / scale;
}

double tolerance_of(torch::ScalarType dtype) { return dtype == torch::kFloat ? 1e-5 : (dtype == torch::kHalf ? 4e-3 : 2e-2); }

}  // namespace

TEST_CASE("the CUDA kernels are built into the gpu suite and on by default") {
  CHECK(model_detail::fused_cuda::built());
  CHECK(model_detail::fused_cuda::enabled());
}

TEST_CASE("SwiGLU's CUDA kernel gives the CPU's values and gradients (packed, odd and unaligned sizes; fp32, bf16, fp16)") {
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(41);
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{3, 7, 64}, {5, 13}, {1, 1}}) {
    for (const bool unaligned : {false, true}) {
      const torch::Tensor gate_values = torch::randn(shape) * 3, up_values = torch::randn(shape);
      const torch::Tensor grad_out = torch::randn(shape);
      torch::Tensor gate = gate_values.clone().requires_grad_(true), up = up_values.clone().requires_grad_(true);
      const torch::Tensor out = at::silu(gate) * up;
      const auto grads = torch::autograd::grad({out}, {gate, up}, {grad_out});
      for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
        CAPTURE(shape);
        CAPTURE(unaligned);
        CAPTURE(dtype);
        const auto on = torch::TensorOptions().device(device).dtype(dtype);
        // Unaligned: the operands start one element into a larger buffer
        // (the kernel's scalar path).
        const auto placed = [&](const torch::Tensor& values) {
          if (!unaligned) return values.to(on).requires_grad_(true);
          torch::Tensor buffer = torch::zeros({values.numel() + 1}, on);
          buffer.narrow(0, 1, values.numel()).copy_(values.flatten());
          return buffer.narrow(0, 1, values.numel()).view(values.sizes()).detach().requires_grad_(true);
        };
        const torch::Tensor g = placed(gate_values), u = placed(up_values);
        const torch::Tensor o = model_detail::swiglu(g, u);
        const auto gpu_grads = torch::autograd::grad({o}, {g, u}, {grad_out.to(on)});
        CHECK(relative_to(o, out) < tolerance_of(dtype));
        CHECK(relative_to(gpu_grads[0], grads[0]) < tolerance_of(dtype));
        CHECK(relative_to(gpu_grads[1], grads[1]) < tolerance_of(dtype));
      }
    }
  }
}

TEST_CASE("the rotary CUDA kernel, in place on the projection's output, gives the CPU's values and gradients") {
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(42);
  const int64_t batch = 2, seq = 19, heads = 3, head_dim = 64;
  for (const bool broadcast_batch : {true, false}) {
    const torch::Tensor input = torch::randn({batch, seq, 32});
    const torch::Tensor weight_values = torch::randn({heads * head_dim, 32}) * 0.2;
    const torch::Tensor angles = torch::rand({broadcast_batch ? 1 : batch, 1, seq, head_dim / 2}) * 6;
    const torch::Tensor grad_out = torch::randn({batch, heads, seq, head_dim});
    const auto run = [&](const torch::TensorOptions& on) {
      const torch::Tensor weight = weight_values.to(on).requires_grad_(true);
      const torch::Tensor x = input.to(on).requires_grad_(true);
      const torch::Tensor projected = at::linear(x, weight).view({batch, seq, heads, head_dim});
      const torch::Tensor out =
          model_detail::apply_rotary(projected, angles.cos().to(on), angles.sin().to(on));
      const auto grads = torch::autograd::grad({out}, {x, weight}, {grad_out.to(on)});
      return std::vector<torch::Tensor>{out.detach().cpu().to(torch::kFloat), grads[0].cpu().to(torch::kFloat),
                                        grads[1].cpu().to(torch::kFloat)};
    };
    const auto cpu = run(torch::TensorOptions());
    for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
      CAPTURE(broadcast_batch);
      CAPTURE(dtype);
      const auto gpu = run(torch::TensorOptions().device(device).dtype(dtype));
      // fp32 products on the GPU may run in TF32.
      const double tolerance = dtype == torch::kFloat ? 2e-3 : 3e-2;
      for (size_t i = 0; i < cpu.size(); ++i) {
        CAPTURE(i);
        CHECK(relative_to(gpu[i], cpu[i]) < tolerance);
      }
    }
  }
}

TEST_CASE("residual add + RMSNorm's CUDA kernels give the CPU's sum, norm and gradients (widths past 48 KiB, plus one)") {
  const torch::Device device(torch::kCUDA, 0);
  torch::manual_seed(43);
  for (const std::pair<int64_t, int64_t>& rows_width :
       {std::pair<int64_t, int64_t>{1, 64}, {700, 2048}, {37, 1001}, {9, 16384}}) {
    const auto [rows, width] = rows_width;
    const torch::Tensor x_values = torch::randn({rows, width}) * 2, delta_values = torch::randn({rows, width});
    const torch::Tensor weight_values = torch::rand({width}) + 0.5;
    const torch::Tensor grad_normed = torch::randn({rows, width}), grad_sum = torch::randn({rows, width});
    for (const bool plus_one : {false, true}) {
      for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
        CAPTURE(rows);
        CAPTURE(width);
        CAPTURE(plus_one);
        CAPTURE(dtype);
        // The reference: the add and the norm on the CPU in fp32 from the
        // same (rounded) inputs.
        const auto rounded = [&](const torch::Tensor& t) { return t.to(dtype).to(torch::kFloat); };
        const torch::Tensor x = rounded(x_values).requires_grad_(true), delta = rounded(delta_values).requires_grad_(true);
        const torch::Tensor weight = rounded(weight_values).requires_grad_(true);
        const torch::Tensor sum = x + delta;
        const torch::Tensor normed = model_detail::rms_norm_of(sum, weight, 1e-6, plus_one);
        const auto grads = torch::autograd::grad({normed, sum}, {x, delta, weight}, {grad_normed, grad_sum});

        const auto on = torch::TensorOptions().device(device).dtype(dtype);
        const torch::Tensor xg = x_values.to(on).requires_grad_(true), dg = delta_values.to(on).requires_grad_(true);
        const torch::Tensor wg = weight_values.to(on).requires_grad_(true);
        const model_detail::AddedNorm fused = model_detail::add_rms_norm_of(xg, dg, wg, 1e-6, plus_one);
        CHECK(relative_to(fused.sum, sum) < tolerance_of(dtype));
        CHECK(relative_to(fused.normed, normed) < tolerance_of(dtype));
        const auto gpu = torch::autograd::grad({fused.normed, fused.sum}, {xg, dg, wg},
                                               {grad_normed.to(on), grad_sum.to(on)});
        for (int i = 0; i < 3; ++i) {
          CAPTURE(i);
          // The weight's gradient sums every row: bf16 rounding of each
          // row's terms adds up.
          CHECK(relative_to(gpu[i], grads[i]) < (i == 2 ? 3 : 1) * tolerance_of(dtype));
        }
        // sum unused downstream (no gradient for it): the norm's alone.
        const model_detail::AddedNorm again = model_detail::add_rms_norm_of(xg, dg, wg, 1e-6, plus_one);
        const torch::Tensor only_norm = torch::autograd::grad({again.normed}, {xg}, {grad_normed.to(on)})[0];
        const torch::Tensor want = torch::autograd::grad({model_detail::rms_norm_of(x + delta, weight, 1e-6, plus_one)},
                                                         {x}, {grad_normed})[0];
        CHECK(relative_to(only_norm, want) < tolerance_of(dtype));
      }
    }
  }
}

TEST_CASE("a bf16 model's loss and gradients with meshrun's CUDA kernels match LibTorch's kernels") {
  ModelInputs inputs;
  torch::manual_seed(44);
  inputs.input_ids = torch::randint(0, 48, {2, 32}, torch::kInt64);
  const auto run = [&](bool kernels) {
    model_detail::fused_cuda::set_enabled(kernels);
    LlamaModel model = make_model(torch::Device(torch::kCUDA, 0), torch::kBFloat16);
    const torch::Tensor logits = model->forward(on_gpu(inputs)).to(torch::kFloat);
    torch::log_softmax(logits, -1).select(-1, 3).sum().backward();
    std::vector<torch::Tensor> out{logits.detach().cpu()};
    for (const auto& parameter : model->parameters()) out.push_back(parameter.grad().cpu().to(torch::kFloat));
    return out;
  };
  const auto library = run(false), own = run(true);
  model_detail::fused_cuda::set_enabled(true);
  REQUIRE(library.size() == own.size());
  for (size_t i = 0; i < own.size(); ++i) {
    CAPTURE(i);
    CHECK(relative_to(own[i], library[i]) < 5e-2);
  }
}

namespace {

// Counts the CUDA synchronizations LibTorch reports while it lives (its
// sync debug mode, set to warn, and a warning handler that counts those
// warnings and keeps the others' text).
class SyncCounter {
 public:
  SyncCounter() : guard_(&handler_) {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  }
  ~SyncCounter() { c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED); }
  int syncs() const { return handler_.syncs; }
  void reset() { handler_.syncs = 0; }

 private:
  struct Handler : c10::WarningHandler {
    void process(const c10::Warning& warning) override {
      if (warning.msg().find("synchroniz") != std::string::npos) ++syncs;
    }
    int syncs = 0;
  };
  Handler handler_;
  c10::WarningUtils::WarningHandlerGuard guard_;
};

}  // namespace

TEST_CASE("an SFT step on CUDA (forward, fused loss, backward, clipping, AdamW) synchronizes with the host 0 times; "
          "reading its figures once") {
  LlamaModel model = make_model(torch::Device(torch::kCUDA, 0), torch::kBFloat16);
  EngineOptions options;
  options.dtype = torch::kBFloat16;
  options.schedule = LrSchedule::make(LrScheduleKind::cosine, 1e-3, 20, 0.1, 0.1);
  options.max_norm = 0.5;
  TrainEngine engine(model, nullptr, nullptr, options);
  MicroBatch batch;
  batch.rows = 2;
  batch.length = 24;
  for (int i = 0; i < batch.rows * batch.length; ++i) {
    batch.input_ids.push_back((i * 7) % 48);
    batch.loss_mask.push_back(i % batch.length > 4 ? 1 : 0);
    batch.position_ids.push_back(i % batch.length);
    batch.sequence_ids.push_back(0);
    batch.attention_mask.push_back(1);
  }
  const auto one_step = [&] {
    const train_detail::SftTensors tensors =
        train_detail::to_tensors(batch, torch::Device(torch::kCUDA, 0), model->config().vocab);
    FusedHeadOptions head;
    head.labels_checked = tensors.inputs.ids_checked;
    engine.backward(engine.forward_loss_sum(tensors.inputs, tensors.labels, head) * 0.01, true);
    return engine.step();
  };
  one_step().read();  // the first: counters uploaded, the rate window filled
  SyncCounter counter;
  std::vector<StepResult> results;
  for (int step = 0; step < 3; ++step) results.push_back(one_step());
  CHECK(counter.syncs() == 0);
  for (StepResult& result : results) {
    CHECK(result.pending());
    result.read();
  }
  CHECK(counter.syncs() >= 1);  // the counter sees a read
  CHECK(results.back().step == 4);
  CHECK(std::isfinite(results.back().grad_norm));
  CHECK(results.back().lr == doctest::Approx(options.schedule.lr(3)));
}
