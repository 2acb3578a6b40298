// KL estimators and the KL controller against hand-computed values.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/rl/math.hpp"

using namespace meshrun;

TEST_CASE("k1, k2 and k3 estimate KL(policy ‖ ref) per token") {
  const torch::Tensor log_probs = torch::tensor({-1.0, -2.0});
  const torch::Tensor ref = torch::tensor({-1.5, -2.0});
  const torch::Tensor k1 = kl_penalty(log_probs, ref, KlEstimator::k1);
  const torch::Tensor k2 = kl_penalty(log_probs, ref, KlEstimator::k2);
  const torch::Tensor k3 = kl_penalty(log_probs, ref, KlEstimator::k3);
  CHECK(k1[0].item<double>() == doctest::Approx(0.5));
  CHECK(k2[0].item<double>() == doctest::Approx(0.125));
  CHECK(k3[0].item<double>() == doctest::Approx(0.10653066).epsilon(1e-6));
  for (const auto& k : {k1, k2, k3}) CHECK(k[1].item<double>() == 0.0);
}

TEST_CASE("the adaptive KL controller moves the coefficient by at most 20% of samples/horizon") {
  KlController adaptive(0.1, 6.0, 10000);
  adaptive.update(9.0, 1000);  // error 0.5, clipped to 0.2
  CHECK(adaptive.coef() == doctest::Approx(0.102));
  adaptive.update(3.0, 1000);  // error -0.5, clipped to -0.2
  CHECK(adaptive.coef() == doctest::Approx(0.102 * 0.98));
  adaptive.update(6.6, 10000);  // error 0.1
  CHECK(adaptive.coef() == doctest::Approx(0.102 * 0.98 * 1.1));
  KlController fixed(0.05, 0, 10000);
  fixed.update(100.0, 1000);
  CHECK(fixed.coef() == 0.05);
}
