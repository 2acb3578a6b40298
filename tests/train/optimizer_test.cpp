// AdamW on flat shards against hand-computed values and torch::optim::AdamW;
// the clipping coefficient; the dynamic loss scaler.
#include "tests/dist/torch_doctest.hpp"

#include <cmath>
#include <limits>

#include "meshrun/train/optimizer.hpp"
#include "src/train/adamw_library.hpp"

namespace meshrun {
namespace {

TEST_CASE("one AdamW step matches the formula, with decay only on decay ranges") {
  AdamWOptions options;
  options.beta1 = 0.9;
  options.beta2 = 0.99;
  options.eps = 1e-8;
  options.weight_decay = 0.1;
  auto shard = AdamWShard::for_params(torch::tensor({1.0f, -2.0f, 3.0f}), {{0, 2}});
  const auto grad = torch::tensor({0.5f, 0.25f, -1.0f});
  const double lr = 0.01;
  adamw_step(shard, grad, options, lr, 1);
  // Step 1: m = 0.1 g, v = 0.01 g^2; bias-corrected m / sqrt(v) = sign(g).
  const double expected[3] = {1.0 * (1 - lr * 0.1) - lr * 0.5 / (0.5 + 1e-8),
                              -2.0 * (1 - lr * 0.1) - lr * 0.25 / (0.25 + 1e-8), 3.0 + lr * 1.0 / (1.0 + 1e-8)};
  for (int i = 0; i < 3; ++i) CHECK(shard.params[i].item<double>() == doctest::Approx(expected[i]).epsilon(1e-6));
  CHECK(shard.exp_avg[0].item<double>() == doctest::Approx(0.05));
  CHECK(shard.exp_avg_sq[2].item<double>() == doctest::Approx(0.01));

  // Step 2 by hand for element 2 (no decay).
  const auto grad2 = torch::tensor({0.0f, 0.0f, 2.0f});
  const double p = shard.params[2].item<double>();
  adamw_step(shard, grad2, options, lr, 2);
  const double m = 0.9 * 0.1 * -1.0 + 0.1 * 2.0, v = 0.99 * 0.01 + 0.01 * 4.0;
  const double expected2 = p - lr / (1 - 0.81) * m / (std::sqrt(v) / std::sqrt(1 - 0.9801) + 1e-8);
  CHECK(shard.params[2].item<double>() == doctest::Approx(expected2).epsilon(1e-6));
}

TEST_CASE("AdamW on a flat shard follows torch::optim::AdamW over several steps") {
  torch::manual_seed(3);
  const auto decayed = torch::randn({7});
  const auto plain = torch::randn({4});
  AdamWOptions options;
  options.beta1 = 0.8;
  options.beta2 = 0.95;
  options.eps = 1e-6;
  options.weight_decay = 0.05;

  auto decayed_ref = decayed.clone().requires_grad_(true);
  auto plain_ref = plain.clone().requires_grad_(true);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{decayed_ref},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(0.03).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.05)));
  groups.emplace_back(std::vector<torch::Tensor>{plain_ref},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(0.03).betas({0.8, 0.95}).eps(1e-6).weight_decay(0.0)));
  torch::optim::AdamW reference(std::move(groups), torch::optim::AdamWOptions(0.03));

  auto shard = AdamWShard::for_params(torch::cat({decayed, plain}), {{0, 7}});
  for (int step = 1; step <= 4; ++step) {
    const auto grad = torch::randn({11});
    decayed_ref.mutable_grad() = grad.narrow(0, 0, 7).clone();
    plain_ref.mutable_grad() = grad.narrow(0, 7, 4).clone();
    reference.step();
    adamw_step(shard, grad, options, 0.03, step);
  }
  const auto expected = torch::cat({decayed_ref.detach(), plain_ref.detach()});
  CHECK(torch::allclose(shard.params, expected, 1e-6, 1e-7));
  CHECK_FALSE(torch::allclose(shard.params, torch::cat({decayed, plain})));
}

TEST_CASE("a large shard, cut into decay runs given out of order, updates like per-parameter AdamW") {
  // Large enough for the CPU step to split every run among threads; runs
  // that start and end at odd elements, with gaps between them.
  torch::manual_seed(5);
  const int64_t numel = 300'001;
  const ElementRanges decaying = {{200'003, 250'000}, {7, 100'000}, {100'000, 150'001}};
  const auto initial = torch::randn({numel});
  AdamWOptions options;
  options.weight_decay = 0.1;
  auto shard = AdamWShard::for_params(initial.clone(), decaying);

  // The reference: one torch::optim::AdamW parameter per run.
  std::vector<std::pair<int64_t, int64_t>> runs = {{0, 7}, {7, 150'001}, {150'001, 200'003}, {200'003, 250'000},
                                                   {250'000, numel}};
  std::vector<torch::Tensor> references;
  std::vector<torch::optim::OptimizerParamGroup> groups;
  for (const auto& [begin, end] : runs) {
    references.push_back(initial.narrow(0, begin, end - begin).clone().requires_grad_(true));
    const bool decays = begin == 7 || begin == 200'003;
    groups.emplace_back(std::vector<torch::Tensor>{references.back()},
                        std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(1e-3)
                                                                         .betas({0.9, 0.95})
                                                                         .eps(1e-8)
                                                                         .weight_decay(decays ? 0.1 : 0.0)));
  }
  torch::optim::AdamW reference(std::move(groups), torch::optim::AdamWOptions(1e-3));
  for (int step = 1; step <= 3; ++step) {
    const auto grad = torch::randn({numel});
    for (size_t i = 0; i < runs.size(); ++i)
      references[i].mutable_grad() = grad.narrow(0, runs[i].first, runs[i].second - runs[i].first).clone();
    reference.step();
    adamw_step(shard, grad, options, 1e-3, step);
  }
  std::vector<torch::Tensor> parts;
  for (const auto& tensor : references) parts.push_back(tensor.detach());
  const auto expected = torch::cat(parts);
  CHECK(torch::allclose(shard.params, expected, 1e-5, 1e-6));
  CHECK((shard.params - expected).abs().max().item<double>() < 1e-5);
  CHECK_FALSE(torch::allclose(shard.params, initial));
}

TEST_CASE("the gradient's multiplier folded into the CPU step equals scaling the gradient first, bit for bit") {
  torch::manual_seed(8);
  const int64_t numel = 70'003;
  const auto initial = torch::randn({numel});
  AdamWOptions options;
  options.weight_decay = 0.1;
  auto folded = AdamWShard::for_params(initial.clone(), {{5, 40'000}});
  auto scaled_first = AdamWShard::for_params(initial.clone(), {{5, 40'000}});
  for (int step = 1; step <= 3; ++step) {
    const auto grad = torch::randn({numel}) * 10;
    const double multiplier = 0.37 / step;
    adamw_step(folded, grad, options, 1e-3, step, multiplier);
    adamw_step(scaled_first, grad * multiplier, options, 1e-3, step);
  }
  CHECK(torch::equal(folded.params, scaled_first.params));
  CHECK(torch::equal(folded.exp_avg, scaled_first.exp_avg));
  CHECK(torch::equal(folded.exp_avg_sq, scaled_first.exp_avg_sq));
  CHECK_FALSE(torch::equal(folded.params, initial));
}

TEST_CASE("the accelerators' step (LibTorch's fused AdamW) follows the CPU step: decay runs, multiplier, steps") {
  // What adamw_step hands _fused_adamw_ off the CPU, run here through its
  // CPU kernel: lists per decay group, the step count, the divisor.
  torch::manual_seed(9);
  const int64_t numel = 50'021;
  const ElementRanges decaying = {{30'000, 40'000}, {3, 10'001}};
  const auto initial = torch::randn({numel});
  AdamWOptions options;
  options.beta1 = 0.85;
  options.beta2 = 0.97;
  options.eps = 1e-7;
  options.weight_decay = 0.2;
  auto cpu = AdamWShard::for_params(initial.clone(), decaying);
  auto library = AdamWShard::for_params(initial.clone(), decaying);
  for (int step = 1; step <= 5; ++step) {
    const auto grad = torch::randn({numel});
    const double multiplier = step % 2 == 0 ? 1.0 : 0.25 * step;
    const double lr = 2e-3 * step;
    adamw_step(cpu, grad, options, lr, step, multiplier);
    const auto workspace = grad.clone();
    train_detail::adamw_library_step(library, workspace, options, lr, step, multiplier);
    // The kernel leaves the multiplied gradient in its workspace.
    CHECK(torch::allclose(workspace, grad * multiplier, 1e-6, 0));
  }
  CHECK(torch::allclose(library.exp_avg, cpu.exp_avg, 1e-5, 1e-7));
  CHECK(torch::allclose(library.exp_avg_sq, cpu.exp_avg_sq, 1e-5, 1e-9));
  CHECK(torch::allclose(library.params, cpu.params, 1e-5, 1e-6));
  // Decay reached exactly the decaying runs: with a zero gradient, only
  // they move.
  auto still = AdamWShard::for_params(initial.clone(), decaying);
  train_detail::adamw_library_step(still, torch::zeros({numel}), options, 0.5, 1, 1.0);
  const auto moved = still.params.ne(initial);
  CHECK(moved.narrow(0, 3, 10'001 - 3).all().item<bool>());
  CHECK(moved.narrow(0, 30'000, 10'000).all().item<bool>());
  CHECK_FALSE(moved.narrow(0, 0, 3).any().item<bool>());
  CHECK_FALSE(moved.narrow(0, 10'001, 30'000 - 10'001).any().item<bool>());
  CHECK_FALSE(moved.narrow(0, 40'000, numel - 40'000).any().item<bool>());
}

TEST_CASE("AdamW shards refuse what they cannot update") {
  CHECK_THROWS_AS(AdamWShard::for_params(torch::zeros({2, 2}), {}), std::logic_error);
  CHECK_THROWS_AS(AdamWShard::for_params(torch::zeros({4}, torch::kFloat64), {}), std::logic_error);
  CHECK_THROWS_WITH_AS(AdamWShard::for_params(torch::zeros({4}), {{2, 5}}), doctest::Contains("[2, 5)"),
                       std::logic_error);
  auto shard = AdamWShard::for_params(torch::zeros({4}), {});
  CHECK_THROWS_AS(adamw_step(shard, torch::zeros({3}), {}, 0.1, 1), std::logic_error);
  CHECK_THROWS_AS(adamw_step(shard, torch::zeros({4}), {}, 0.1, 0), std::logic_error);
  CHECK_THROWS_AS(adamw_step(shard, torch::zeros({4}), {}, 0.1, 1, std::numeric_limits<double>::infinity()),
                  std::logic_error);
}

TEST_CASE("the clipping coefficient follows clip_grad_norm_") {
  CHECK(clip_coefficient(0.5, 1.0) == 1.0);
  CHECK(clip_coefficient(4.0, 1.0) == doctest::Approx(1.0 / (4.0 + 1e-6)));
  CHECK(clip_coefficient(4.0, 0.0) == 1.0);
  CHECK(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0) == 1.0);
  // The same as torch on a real gradient.
  auto a = torch::tensor({3.0f, 4.0f}).requires_grad_(true);
  a.mutable_grad() = torch::tensor({3.0f, 4.0f});
  const double norm = torch::nn::utils::clip_grad_norm_(std::vector<torch::Tensor>{a}, 2.0);
  CHECK(norm == doctest::Approx(5.0));
  CHECK(a.grad()[1].item<double>() == doctest::Approx(4.0 * clip_coefficient(5.0, 2.0)).epsilon(1e-6));
}

TEST_CASE("the loss scaler backs off on overflow and grows after a run of finite steps") {
  LossScalerOptions options;
  options.initial_scale = 1024;
  options.growth_interval = 3;
  options.min_scale = 256;
  LossScaler scaler(true, options);
  CHECK(scaler.scale() == 1024);
  scaler.update(true);
  CHECK(scaler.scale() == 512);
  CHECK(scaler.skipped_steps() == 1);
  scaler.update(false);
  scaler.update(false);
  CHECK(scaler.scale() == 512);
  scaler.update(false);
  CHECK(scaler.scale() == 1024);
  CHECK(scaler.finite_steps_in_a_row() == 0);
  scaler.update(true);
  scaler.update(true);
  scaler.update(true);
  CHECK(scaler.scale() == 256);  // not below min_scale
  scaler.restore(2048, 2, 7);
  CHECK(scaler.scale() == 2048);
  CHECK(scaler.skipped_steps() == 7);

  LossScaler disabled;
  disabled.update(true);
  CHECK(disabled.scale() == 1);
  CHECK(disabled.skipped_steps() == 1);
  CHECK_THROWS_AS(LossScaler(true, LossScalerOptions{.backoff_factor = 2.0}), std::logic_error);
}

TEST_CASE("the loss scaler counts the skips in a row it could not answer by lowering the scale") {
  LossScaler disabled;
  disabled.update(true);
  disabled.update(true);
  CHECK(disabled.skips_without_backoff_in_a_row() == 2);
  disabled.update(false);
  CHECK(disabled.skips_without_backoff_in_a_row() == 0);
  disabled.update(true);
  CHECK(disabled.skips_without_backoff_in_a_row() == 1);

  LossScaler scaler(true, LossScalerOptions{.initial_scale = 4, .min_scale = 1});
  scaler.update(true);  // 4 -> 2
  scaler.update(true);  // 2 -> 1
  CHECK(scaler.scale() == 1);
  CHECK(scaler.skips_without_backoff_in_a_row() == 0);
  scaler.update(true);
  scaler.update(true);
  CHECK(scaler.skips_without_backoff_in_a_row() == 2);
  CHECK(scaler.skipped_steps() == 4);
  scaler.update(false);
  CHECK(scaler.skips_without_backoff_in_a_row() == 0);
  scaler.update(true);
  scaler.restore(1, 0, 5);  // a resumed run starts its count over
  CHECK(scaler.skips_without_backoff_in_a_row() == 0);
}

}  // namespace
}  // namespace meshrun
