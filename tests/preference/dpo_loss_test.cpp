// The DPO losses against values worked out by hand: ln 2 when policy and
// reference agree, the sigmoid loss and its label smoothing, IPO's
// per-token averages, the implicit rewards, and the gradient's sign.
#include <cmath>

#include "tests/dist/torch_doctest.hpp"

#include "meshrun/preference/dpo_loss.hpp"

using namespace meshrun;

namespace {

torch::Tensor values(std::initializer_list<double> list) { return torch::tensor(std::vector<double>(list), torch::kFloat64); }

DpoConfig config(DpoLoss loss, double beta, double smoothing = 0) {
  DpoConfig out;
  out.loss = loss;
  out.beta = beta;
  out.label_smoothing = smoothing;
  return out;
}

}  // namespace

TEST_CASE("policy equal to the reference: every sigmoid loss is ln 2, the rewards 0") {
  const torch::Tensor chosen = values({-3.0, -10.5}), rejected = values({-4.0, -2.0}), tokens = values({3, 7});
  for (const double smoothing : {0.0, 0.1, 0.3}) {
    const DpoLossTerms terms =
        dpo_loss(chosen, rejected, chosen, rejected, tokens, tokens, config(DpoLoss::sigmoid, 0.1, smoothing));
    CHECK(terms.loss[0].item<double>() == doctest::Approx(std::log(2.0)).epsilon(1e-12));
    CHECK(terms.loss[1].item<double>() == doctest::Approx(std::log(2.0)).epsilon(1e-12));
    CHECK(terms.chosen_rewards.abs().max().item<double>() == 0.0);
    CHECK(terms.rejected_rewards.abs().max().item<double>() == 0.0);
  }
}

TEST_CASE("the sigmoid loss and cDPO's label smoothing by hand") {
  // policy: chosen -2, rejected -5; reference: chosen -3, rejected -4.
  // margin = (-2 - -5) - (-3 - -4) = 3 - 1 = 2; β = 0.5 → β·margin = 1.
  const torch::Tensor one = values({1});
  const auto terms = [&](double smoothing) {
    return dpo_loss(values({-2}), values({-5}), values({-3}), values({-4}), one, one,
                    config(DpoLoss::sigmoid, 0.5, smoothing));
  };
  const double log_sigmoid_1 = -std::log1p(std::exp(-1.0)), log_sigmoid_minus_1 = -std::log1p(std::exp(1.0));
  CHECK(terms(0).loss.item<double>() == doctest::Approx(-log_sigmoid_1).epsilon(1e-12));
  CHECK(terms(0.2).loss.item<double>() ==
        doctest::Approx(-0.8 * log_sigmoid_1 - 0.2 * log_sigmoid_minus_1).epsilon(1e-12));
  // β·(policy − reference): chosen 0.5 × (−2 − −3) = 0.5, rejected 0.5 × (−5 − −4) = −0.5.
  CHECK(terms(0).chosen_rewards.item<double>() == doctest::Approx(0.5));
  CHECK(terms(0).rejected_rewards.item<double>() == doctest::Approx(-0.5));
}

TEST_CASE("IPO averages per token, aims at a margin of 1/(2β)") {
  // Per token: policy chosen -6/3 = -2, rejected -10/2 = -5; reference
  // chosen -9/3 = -3, rejected -8/2 = -4; margin 2; β = 0.25 → target 2:
  // loss 0. With β = 1 the target is 0.5: loss (2 − 0.5)² = 2.25.
  const torch::Tensor chosen_tokens = values({3}), rejected_tokens = values({2});
  const auto loss = [&](double beta) {
    return dpo_loss(values({-6}), values({-10}), values({-9}), values({-8}), chosen_tokens, rejected_tokens,
                    config(DpoLoss::ipo, beta))
        .loss.item<double>();
  };
  CHECK(loss(0.25) == doctest::Approx(0.0).epsilon(1e-12));
  CHECK(loss(1.0) == doctest::Approx(2.25).epsilon(1e-12));
}

TEST_CASE("the loss pushes the chosen log-probability up and the rejected one down") {
  const torch::Tensor chosen = values({-3}).requires_grad_(true), rejected = values({-3}).requires_grad_(true);
  const torch::Tensor one = values({1});
  dpo_loss(chosen, rejected, values({-3}), values({-3}), one, one, config(DpoLoss::sigmoid, 0.1)).loss.sum().backward();
  // d/dπc of -log σ(β(πc − πr)) at 0 is −β/2.
  CHECK(chosen.grad().item<double>() == doctest::Approx(-0.05).epsilon(1e-12));
  CHECK(rejected.grad().item<double>() == doctest::Approx(0.05).epsilon(1e-12));
}

TEST_CASE("the reward model's Bradley-Terry loss by hand") {
  // s_c − s_r = 2 → log(1 + e^-2); equal scores → ln 2; reversed → log(1 + e^2).
  const torch::Tensor loss = bradley_terry_loss(values({1.5, 0.3, -1.0}), values({-0.5, 0.3, 1.0}));
  CHECK(loss[0].item<double>() == doctest::Approx(std::log1p(std::exp(-2.0))).epsilon(1e-12));
  CHECK(loss[1].item<double>() == doctest::Approx(std::log(2.0)).epsilon(1e-12));
  CHECK(loss[2].item<double>() == doctest::Approx(std::log1p(std::exp(2.0))).epsilon(1e-12));
}
