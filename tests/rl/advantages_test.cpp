// Token rewards, GAE, REINFORCE returns, RLOO and group normalisation
// against hand-computed values.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/rl/math.hpp"

using namespace meshrun;

namespace {

void check_values(const torch::Tensor& got, std::vector<float> expected) {
  const torch::Tensor flat = got.to(torch::kFloat).contiguous().view(-1);
  REQUIRE(flat.numel() == static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    CHECK_MESSAGE(flat[static_cast<int64_t>(i)].item<float>() == doctest::Approx(expected[i]).epsilon(1e-5), "element " << i);
}

}  // namespace

TEST_CASE("token rewards: -kl_coef × kl per token, the scalar reward on the last response token") {
  const torch::Tensor kl = torch::tensor({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}).view({2, 3});
  const torch::Tensor mask = torch::tensor({1, 1, 0, 1, 1, 1}).view({2, 3});
  check_values(token_rewards(torch::tensor({1.0f, 2.0f}), kl, 0.5, mask), {-0.05f, 0.9f, 0.0f, -0.2f, -0.25f, 1.7f});
}

TEST_CASE("GAE over token rewards and values") {
  const torch::Tensor rewards = torch::tensor({0.0f, 0.0f, 1.0f}).view({1, 3});
  const torch::Tensor values = torch::tensor({0.5f, 0.6f, 0.7f}).view({1, 3});
  const torch::Tensor mask = torch::ones({1, 3});
  Advantages a = gae_advantages(rewards, values, mask, 1.0, 0.9);
  check_values(a.advantages, {0.433f, 0.37f, 0.3f});
  check_values(a.returns, {0.933f, 0.97f, 1.0f});
  check_values(gae_advantages(rewards, values, mask, 0.5, 1.0).advantages, {-0.25f, -0.1f, 0.3f});
  // Positions past the response (mask 0) neither count nor leak back.
  Advantages masked = gae_advantages(torch::tensor({0.0f, 1.0f, 5.0f}).view({1, 3}),
                                     torch::tensor({0.2f, 0.4f, 9.0f}).view({1, 3}),
                                     torch::tensor({1, 1, 0}).view({1, 3}), 1.0, 1.0);
  check_values(masked.advantages, {0.8f, 0.6f, 0.0f});
  check_values(masked.returns, {1.0f, 1.0f, 0.0f});
}

TEST_CASE("REINFORCE: discounted returns as advantages") {
  Advantages a = reinforce_advantages(torch::tensor({0.0f, 0.0f, 1.0f, 2.0f, 0.0f, 0.0f}).view({2, 3}),
                                      torch::tensor({1, 1, 1, 1, 0, 0}).view({2, 3}), 0.9);
  check_values(a.advantages, {0.81f, 0.9f, 1.0f, 2.0f, 0.0f, 0.0f});
  check_values(a.returns, {0.81f, 0.9f, 1.0f, 2.0f, 0.0f, 0.0f});
}

TEST_CASE("RLOO subtracts the mean of the other samples of the same prompt") {
  const torch::Tensor ones4 = torch::ones({4});
  check_values(rloo_rewards(torch::tensor({1.0f, 2.0f, 3.0f, 4.0f}), 2, ones4), {-1.0f, 1.0f, -1.0f, 1.0f});
  check_values(rloo_rewards(torch::tensor({1.0f, 2.0f, 6.0f}), 3, torch::ones({3})), {-3.0f, -1.5f, 4.5f});
  // A dropped sample (weight 0) is out of its group's baseline and gets 0.
  check_values(rloo_rewards(torch::tensor({1.0f, 2.0f, 6.0f}), 3, torch::tensor({1.0f, 0.0f, 1.0f})),
               {-5.0f, 0.0f, 5.0f});
  CHECK_THROWS_WITH_AS(rloo_rewards(torch::tensor({1.0f, 2.0f, 3.0f}), 2, torch::ones({3})),
                       doctest::Contains("do not split into groups of 2"), std::logic_error);
}

TEST_CASE("group normalisation: (r - group mean) / group std") {
  check_values(group_normalized_rewards(torch::tensor({1.0f, 3.0f, 2.0f, 2.0f}), 2, torch::ones({4})),
               {-1.0f, 1.0f, 0.0f, 0.0f});
  check_values(group_normalized_rewards(torch::tensor({1.0f, 3.0f, 100.0f}), 3, torch::tensor({1.0f, 1.0f, 0.0f})),
               {-1.0f, 1.0f, 0.0f});
}

TEST_CASE("group mean baseline: r - group mean, without the std") {
  check_values(group_mean_rewards(torch::tensor({1.0f, 3.0f, 2.0f, 2.0f}), 2, torch::ones({4})),
               {-1.0f, 1.0f, 0.0f, 0.0f});
  check_values(group_mean_rewards(torch::tensor({0.0f, 4.0f, 100.0f}), 3, torch::tensor({1.0f, 1.0f, 0.0f})),
               {-2.0f, 2.0f, 0.0f});
  // The row's baseline picks the function.
  const torch::Tensor r = torch::tensor({0.0f, 4.0f, 1.0f, 1.0f});
  check_values(apply_group_baseline(GroupBaseline::mean, r, 2, torch::ones({4})), {-2.0f, 2.0f, 0.0f, 0.0f});
  check_values(apply_group_baseline(GroupBaseline::mean_std, r, 2, torch::ones({4})), {-1.0f, 1.0f, 0.0f, 0.0f});
  check_values(apply_group_baseline(GroupBaseline::leave_one_out, r, 2, torch::ones({4})), {-4.0f, 4.0f, 0.0f, 0.0f});
  check_values(apply_group_baseline(GroupBaseline::none, r, 2, torch::ones({4})), {0.0f, 4.0f, 1.0f, 1.0f});
}

TEST_CASE("the overlong penalty falls linearly over the buffer") {
  // max_new_tokens 10, buffer 4: free up to 6 tokens, -1 at 10.
  check_values(overlong_penalty(torch::tensor({3.0f, 6.0f, 8.0f, 10.0f}), 10, 4, 1.0), {0.0f, 0.0f, -0.5f, -1.0f});
  check_values(overlong_penalty(torch::tensor({10.0f}), 10, 0, 1.0), {0.0f});
}

TEST_CASE("masked whitening uses only the masked elements") {
  check_values(masked_whiten(torch::tensor({1.0f, 2.0f, 3.0f, 100.0f}), torch::tensor({1, 1, 1, 0})),
               {-1.2247449f, 0.0f, 1.2247449f, 0.0f});
  CHECK(masked_sum(torch::tensor({1.0f, 2.0f, 3.0f}), torch::tensor({1, 0, 1})).item<float>() == 4.0f);
}
