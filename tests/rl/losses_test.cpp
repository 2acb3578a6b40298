// Clipped policy and value losses and running reward moments against
// hand-computed values.
#include <cmath>

#include "tests/dist/torch_doctest.hpp"

#include "meshrun/rl/math.hpp"

using namespace meshrun;

TEST_CASE("the clipped policy loss takes the pessimistic term and counts clipping") {
  const double up = std::log(1.5), down = std::log(0.5);
  const torch::Tensor log_probs = torch::tensor({up, up, down, down, up}, torch::kFloat).view({1, 5});
  const torch::Tensor old = torch::zeros({1, 5});
  const torch::Tensor advantages = torch::tensor({1.0f, -1.0f, 1.0f, -1.0f, 1.0f}).view({1, 5});
  const torch::Tensor mask = torch::tensor({1, 1, 1, 1, 0}).view({1, 5});
  PolicyLossTerms loss = policy_loss(log_probs, old, advantages, mask, PolicyLossOptions{});
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
  PolicyLossTerms loss =
      policy_loss(log_probs, torch::zeros({1, 2}), torch::ones({1, 2}), torch::ones({1, 2}), PolicyLossOptions{});
  loss.loss.sum().backward();
  CHECK(log_probs.grad()[0][0].item<float>() == 0.0f);
  CHECK(log_probs.grad()[0][1].item<float>() == doctest::Approx(-1.1));
}

TEST_CASE("clip-higher widens only the upper bound") {
  const torch::Tensor log_probs = torch::tensor({std::log(1.25), std::log(0.75)}, torch::kFloat).view({1, 2});
  const torch::Tensor old = torch::zeros({1, 2}), mask = torch::ones({1, 2});
  const torch::Tensor advantages = torch::tensor({1.0f, -1.0f}).view({1, 2});
  PolicyLossOptions options;
  const PolicyLossTerms symmetric = policy_loss(log_probs, old, advantages, mask, options);
  CHECK(symmetric.loss[0][0].item<float>() == doctest::Approx(-1.2));  // 1.25 clipped to 1.2
  options.clip_high = 0.28;
  const PolicyLossTerms higher = policy_loss(log_probs, old, advantages, mask, options);
  CHECK(higher.loss[0][0].item<float>() == doctest::Approx(-1.25));  // within 1.28
  CHECK(higher.clipped[0][0].item<float>() == 0.0f);
  CHECK(higher.loss[0][1].item<float>() == doctest::Approx(0.8));  // the lower bound 0.8 still holds
}

TEST_CASE("dual clip caps the loss of negative advantages at dual_clip × |A|") {
  const torch::Tensor log_probs = torch::tensor({std::log(4.0), std::log(2.0), std::log(4.0)}, torch::kFloat).view({1, 3});
  const torch::Tensor old = torch::zeros({1, 3}), mask = torch::ones({1, 3});
  const torch::Tensor advantages = torch::tensor({-1.0f, -1.0f, 1.0f}).view({1, 3});
  PolicyLossOptions options;
  options.dual_clip = 3;
  const PolicyLossTerms terms = policy_loss(log_probs, old, advantages, mask, options);
  CHECK(terms.loss[0][0].item<float>() == doctest::Approx(3.0));   // 4 capped at 3
  CHECK(terms.clipped[0][0].item<float>() == 1.0f);
  CHECK(terms.loss[0][1].item<float>() == doctest::Approx(2.0));   // below the cap
  CHECK(terms.clipped[0][1].item<float>() == 0.0f);
  CHECK(terms.loss[0][2].item<float>() == doctest::Approx(-1.2));  // positive A: the usual clip
  options.dual_clip = 0;
  CHECK(policy_loss(log_probs, old, advantages, mask, options).loss[0][0].item<float>() == doctest::Approx(4.0));
}

TEST_CASE("GSPO clips one sequence ratio, the geometric mean of its token ratios") {
  // Sequence 0: ratios 1.1 and 1.3 → s = √1.43 ≈ 1.1958 (inside 1.2); sequence 1:
  // ratios 1.5, 1.5 and a masked token → s = 1.5, clipped.
  torch::Tensor log_probs =
      torch::tensor({std::log(1.1), std::log(1.3), 0.0, std::log(1.5), std::log(1.5), 5.0}, torch::kFloat)
          .view({2, 3})
          .requires_grad_();
  const torch::Tensor mask = torch::tensor({1.0f, 1.0f, 0.0f, 1.0f, 1.0f, 0.0f}).view({2, 3});
  PolicyLossOptions options;
  options.kind = PolicyLoss::gspo;
  const PolicyLossTerms terms = policy_loss(log_probs, torch::zeros({2, 3}), torch::ones({2, 3}), mask, options);
  const double s = std::sqrt(1.1 * 1.3);
  CHECK(terms.ratio[0][0].item<float>() == doctest::Approx(s));
  CHECK(terms.ratio[0][1].item<float>() == doctest::Approx(s));
  CHECK(terms.loss[0][0].item<float>() == doctest::Approx(-s));
  CHECK(terms.loss[1][0].item<float>() == doctest::Approx(-1.2));
  CHECK(terms.clipped[1][1].item<float>() == 1.0f);
  CHECK(terms.loss[1][2].item<float>() == 0.0f);
  terms.loss.sum().backward();
  // Each token's gradient is s × ∂ log π_t; none through a clipped sequence.
  CHECK(log_probs.grad()[0][0].item<float>() == doctest::Approx(-s));
  CHECK(log_probs.grad()[1][0].item<float>() == 0.0f);
}

TEST_CASE("loss aggregations weigh tokens and sequences as their names say") {
  const torch::Tensor mask = torch::tensor({1.0f, 1.0f, 1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f})
                                 .view({3, 4});  // lengths 3, 1 and a dropped sample
  const torch::Tensor terms = torch::tensor({1.0f, 2.0f, 3.0f, 9.0f, 4.0f, 9.0f, 9.0f, 9.0f, 9.0f, 9.0f, 9.0f, 9.0f})
                                  .view({3, 4});
  CHECK(aggregate_loss(terms, mask, LossAggregation::token_mean, 4).item<double>() == doctest::Approx(2.5));
  CHECK(aggregate_loss(terms, mask, LossAggregation::seq_mean_token_sum, 4).item<double>() == doctest::Approx(5.0));
  CHECK(aggregate_loss(terms, mask, LossAggregation::seq_mean_token_mean, 4).item<double>() == doctest::Approx(3.0));
  CHECK(aggregate_loss(terms, mask, LossAggregation::seq_mean_token_sum_norm, 4).item<double>() ==
        doctest::Approx(1.25));
  CHECK(loss_weights(mask, LossAggregation::seq_mean_token_mean, 4)[2].abs().sum().item<float>() == 0.0f);
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

namespace {

// Two sequences: row 0's ratios 1, e^-1, e^1.5 (its fourth token not
// judged), row 1's e^-0.5 four times.
struct CorrectionCase {
  torch::Tensor old = torch::tensor({-1.0f, -2.0f, -0.5f, 0.0f, -1.0f, -1.0f, -1.0f, -1.0f}).view({2, 4});
  torch::Tensor rollout = torch::tensor({-1.0f, -1.0f, -2.0f, -7.0f, -0.5f, -0.5f, -0.5f, -0.5f}).view({2, 4});
  torch::Tensor mask = torch::tensor({1.0f, 1.0f, 1.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f}).view({2, 4});
  RolloutCorrectionTerms run(RolloutCorrection kind, double low = 0.5, double high = 2.0) const {
    return rollout_correction(old, rollout, mask, RolloutCorrectionOptions{kind, 2.0, low, high});
  }
};

void check_factors(const torch::Tensor& factors, const std::vector<double>& expected) {
  REQUIRE(factors.numel() == static_cast<int64_t>(expected.size()));
  const torch::Tensor flat = factors.reshape({-1}).to(torch::kDouble);
  for (size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(i);
    CHECK(flat[static_cast<int64_t>(i)].item<double>() == doctest::Approx(expected[i]).epsilon(1e-5));
  }
}

}  // namespace

TEST_CASE("rollout correction: the ratio figures over the judged tokens, and none changes nothing") {
  const CorrectionCase c;
  const RolloutCorrectionTerms none = c.run(RolloutCorrection::none);
  CHECK(torch::equal(none.factors, torch::ones({2, 4})));
  CHECK(none.tokens == 7);
  const double e = std::exp(1.0);
  CHECK(none.ratio_sum == doctest::Approx(1 + 1 / e + std::exp(1.5) + 4 * std::exp(-0.5)).epsilon(1e-5));
  CHECK(none.ratio_max == doctest::Approx(std::exp(1.5)).epsilon(1e-5));
  CHECK(none.clipped == 0);
  CHECK(none.masked == 0);
}

TEST_CASE("rollout correction: tis weights each token by its ratio capped at rollout_is_cap") {
  const RolloutCorrectionTerms tis = CorrectionCase{}.run(RolloutCorrection::tis);
  const double w = std::exp(-0.5);
  check_factors(tis.factors, {1, std::exp(-1.0), 2, 1, w, w, w, w});
  CHECK(tis.clipped == 1);
  CHECK(tis.masked == 0);
}

TEST_CASE("rollout correction: decoupled weights by the behaviour ratio, capped, like tis") {
  const CorrectionCase c;
  const RolloutCorrectionTerms decoupled = c.run(RolloutCorrection::decoupled);
  const RolloutCorrectionTerms tis = c.run(RolloutCorrection::tis);
  CHECK(torch::equal(decoupled.factors, tis.factors));
  CHECK(decoupled.clipped == 1);
}

TEST_CASE("rollout correction: icepop masks the tokens outside the band, seq-mask whole sequences") {
  const CorrectionCase c;
  const RolloutCorrectionTerms icepop = c.run(RolloutCorrection::icepop);
  check_factors(icepop.factors, {1, 0, 0, 1, 1, 1, 1, 1});
  CHECK(icepop.masked == 2);
  // Geometric means: row 0 exp((0 - 1 + 1.5) / 3) ≈ 1.18, row 1 e^-0.5 ≈ 0.61.
  const RolloutCorrectionTerms kept = c.run(RolloutCorrection::seq_mask);
  check_factors(kept.factors, {1, 1, 1, 1, 1, 1, 1, 1});
  CHECK(kept.masked == 0);
  const RolloutCorrectionTerms narrow = c.run(RolloutCorrection::seq_mask, 0.7, 2.0);
  check_factors(narrow.factors, {1, 1, 1, 1, 0, 0, 0, 0});
  CHECK(narrow.masked == 4);
  const RolloutCorrectionTerms narrow_high = c.run(RolloutCorrection::seq_mask, 0.5, 1.1);
  check_factors(narrow_high.factors, {0, 0, 0, 0, 1, 1, 1, 1});
  CHECK(narrow_high.masked == 3);
}
