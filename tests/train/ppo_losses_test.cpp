// Clipped policy and value losses and running reward moments against
// hand-computed values.
#include <cmath>

#include "tests/dist/torch_doctest.hpp"

#include "meshrun/ppo_math.hpp"

using namespace meshrun;

TEST_CASE("the clipped policy loss takes the pessimistic term and counts clipping") {
  const double up = std::log(1.5), down = std::log(0.5);
  const torch::Tensor log_probs = torch::tensor({up, up, down, down, up}, torch::kFloat).view({1, 5});
  const torch::Tensor old = torch::zeros({1, 5});
  const torch::Tensor advantages = torch::tensor({1.0f, -1.0f, 1.0f, -1.0f, 1.0f}).view({1, 5});
  const torch::Tensor mask = torch::tensor({1, 1, 1, 1, 0}).view({1, 5});
  PolicyLoss loss = clipped_policy_loss(log_probs, old, advantages, mask, 0.2);
  const std::vector<float> expected_loss = {-1.2f, 1.5f, -0.5f, 0.8f, 0.0f};
  const std::vector<float> expected_clipped = {1, 0, 0, 1, 0};
  for (int64_t i = 0; i < 5; ++i) {
    CHECK(loss.loss[0][i].item<float>() == doctest::Approx(expected_loss[static_cast<size_t>(i)]));
    CHECK(loss.clipped[0][i].item<float>() == expected_clipped[static_cast<size_t>(i)]);
  }
  CHECK(loss.ratio[0][0].item<float>() == doctest::Approx(1.5));
}

TEST_CASE("the policy loss's gradient vanishes where the ratio is clipped") {
  torch::Tensor log_probs = torch::tensor({std::log(1.5), std::log(1.1)}, torch::kFloat).view({1, 2}).requires_grad_();
  PolicyLoss loss = clipped_policy_loss(log_probs, torch::zeros({1, 2}), torch::ones({1, 2}), torch::ones({1, 2}), 0.2);
  loss.loss.sum().backward();
  CHECK(log_probs.grad()[0][0].item<float>() == 0.0f);
  CHECK(log_probs.grad()[0][1].item<float>() == doctest::Approx(-1.1));
}

TEST_CASE("the clipped value loss takes the larger of the plain and clipped errors") {
  const torch::Tensor values = torch::tensor({1.0f, 0.6f}).view({1, 2});
  const torch::Tensor old = torch::tensor({0.5f, 0.5f}).view({1, 2});
  const torch::Tensor returns = torch::tensor({2.0f, 0.55f}).view({1, 2});
  const torch::Tensor mask = torch::ones({1, 2});
  const torch::Tensor clipped = clipped_value_loss(values, old, returns, mask, 0.2);
  CHECK(clipped[0][0].item<float>() == doctest::Approx(0.845));
  CHECK(clipped[0][1].item<float>() == doctest::Approx(0.00125));
  CHECK(clipped_value_loss(values, old, returns, mask, 0)[0][0].item<float>() == doctest::Approx(0.5));
  CHECK(clipped_value_loss(values, old, returns, torch::zeros({1, 2}), 0.2).abs().sum().item<float>() == 0.0f);
}

TEST_CASE("running moments over batches equal the moments of all values") {
  RunningMoments moments;
  moments.update(torch::tensor({1.0, 2.0, 3.0}));
  moments.update(torch::tensor({4.0, 5.0}));
  CHECK(moments.count() == 5);
  CHECK(moments.mean() == doctest::Approx(3.0));
  CHECK(moments.std() == doctest::Approx(std::sqrt(2.0)));
}
