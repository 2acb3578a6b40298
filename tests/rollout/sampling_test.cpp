// sample_next_tokens: inverse CDF over hand-computed distributions, greedy,
// temperature, top-k, top-p and the vocabulary limit.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/rollout/generation.hpp"
#include "src/rollout/sampling_detail.hpp"

using namespace meshrun;

namespace {

// Probabilities 0.1, 0.2, 0.3, 0.4 as logits.
torch::Tensor four_logits(int64_t rows) {
  return torch::tensor({0.1, 0.2, 0.3, 0.4}, torch::kFloat).log().unsqueeze(0).expand({rows, 4}).contiguous();
}

std::vector<int64_t> sample(const SamplingOptions& options, std::vector<double> uniforms) {
  const torch::Tensor tokens =
      sample_next_tokens(four_logits(static_cast<int64_t>(uniforms.size())), options, torch::tensor(uniforms, torch::kFloat64));
  return std::vector<int64_t>(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + tokens.numel());
}

// The CPU's cut and CDF against the tensor form on the same rows, for
// every pair of top_k and top_p; never a token of no probability.
void check_host_matches_tensors(const torch::Tensor& logits, const torch::Tensor& uniforms, const std::vector<int>& ks,
                                const std::vector<double>& ps) {
  const torch::Tensor probabilities = torch::softmax(logits, -1);
  for (const int k : ks) {
    for (const double p : ps) {
      SamplingOptions options;
      options.top_k = k;
      options.top_p = p;
      const torch::Tensor host = sample_next_tokens(logits, options, uniforms);
      const torch::Tensor tensors = sampling_detail::sample_with_tensors(probabilities, options, uniforms);
      CHECK_MESSAGE(host.equal(tensors), "top_k " << k << ", top_p " << p << ": "
                                                   << host.ne(tensors).sum().item<int64_t>() << " rows differ");
      CHECK(probabilities.gather(1, host.unsqueeze(1)).gt(0).all().item<bool>());
    }
  }
}

}  // namespace

TEST_CASE("sampling picks the token whose cumulative probability first exceeds the uniform number") {
  SamplingOptions options;
  // CDF 0.1, 0.3, 0.6, 1.0.
  CHECK(sample(options, {0.05, 0.15, 0.35, 0.65, 0.999}) == std::vector<int64_t>{0, 1, 2, 3, 3});
}

TEST_CASE("temperature 0 is greedy; a lower temperature sharpens") {
  SamplingOptions greedy;
  greedy.temperature = 0;
  CHECK(sample(greedy, {0.0, 0.5, 0.99}) == std::vector<int64_t>{3, 3, 3});
  SamplingOptions sharp;
  sharp.temperature = 0.5;  // p² normalised: CDF 1/30, 5/30, 14/30, 1
  CHECK(sample(sharp, {0.02, 0.1, 0.25, 0.5}) == std::vector<int64_t>{0, 1, 2, 3});
  SamplingOptions plain;
  CHECK(sample(plain, {0.25}) == std::vector<int64_t>{1});
}

TEST_CASE("top-k and top-p keep the most probable tokens and renormalise, the CDF in id order") {
  SamplingOptions top_k;
  top_k.top_k = 2;  // tokens 2 (0.3) and 3 (0.4): CDF 3/7, 1
  CHECK(sample(top_k, {0.2, 0.42, 0.43, 0.999}) == std::vector<int64_t>{2, 2, 3, 3});
  SamplingOptions top_p;
  top_p.top_p = 0.5;  // mass before token 2 is 0.4 < 0.5: kept; before token 1 is 0.7: cut
  CHECK(sample(top_p, {0.2, 0.5, 0.999}) == std::vector<int64_t>{2, 3, 3});
  top_p.top_p = 0.3;  // only the most probable token
  CHECK(sample(top_p, {0.0, 0.999}) == std::vector<int64_t>{3, 3});
  top_p.top_k = 3;  // both cuts: the stricter wins
  CHECK(sample(top_p, {0.0, 0.999}) == std::vector<int64_t>{3, 3});
}

TEST_CASE("tokens tied at the cut all stay, whatever order a sort would give them") {
  // Probabilities 0.1, 0.3, 0.3, 0.3: the second largest is tied three ways.
  const torch::Tensor logits = torch::tensor({0.1, 0.3, 0.3, 0.3}, torch::kFloat).log().unsqueeze(0).expand({3, 4});
  SamplingOptions options;
  options.top_k = 2;  // tokens 1, 2 and 3: CDF 1/3, 2/3, 1
  const auto tokens = sample_next_tokens(logits, options, torch::tensor({0.1, 0.5, 0.9}, torch::kFloat64));
  CHECK(std::vector<int64_t>(tokens.data_ptr<int64_t>(), tokens.data_ptr<int64_t>() + 3) == std::vector<int64_t>{1, 2, 3});
  options.top_k = -1;
  options.top_p = 0.35;  // 0.3 + 0.3 reach it: the third 0.3 is tied with the second
  const auto nucleus = sample_next_tokens(logits, options, torch::tensor({0.1, 0.5, 0.9}, torch::kFloat64));
  CHECK(std::vector<int64_t>(nucleus.data_ptr<int64_t>(), nucleus.data_ptr<int64_t>() + 3) == std::vector<int64_t>{1, 2, 3});
}

TEST_CASE("the CPU's radix-select cut picks what the sorting tensor form picks") {
  torch::manual_seed(23);
  // Rows of different spreads (near uniform to peaked) over 1000 ids, some
  // with many exactly equal logits.
  torch::Tensor logits = torch::randn({240, 1000}) * torch::linspace(0.1, 8.0, 240).unsqueeze(1);
  logits.narrow(0, 0, 20).narrow(1, 0, 500).fill_(1.5);
  check_host_matches_tensors(logits, torch::rand({240}, torch::kFloat64), {-1, 1, 7, 500, 999}, {1.0, 0.95, 0.5, 0.1});
}

TEST_CASE("the radix-select cut and the blocked CDF walk match the tensor form at a large vocabulary with zero probabilities") {
  torch::manual_seed(29);
  // 4113 ids (64 blocks of the CDF walk and a partial one); the sharper
  // rows underflow most probabilities to exactly 0, so whole blocks of the
  // walk carry no mass and the last kept token lies blocks before the end.
  torch::Tensor logits = torch::randn({96, 4113}) * torch::linspace(0.05, 120.0, 96).unsqueeze(1);
  const torch::Tensor uniforms = torch::rand({96}, torch::kFloat64);
  uniforms[0] = 0.0;
  REQUIRE(torch::softmax(logits, -1).eq(0).sum().item<int64_t>() > 96 * 1000);
  check_host_matches_tensors(logits, uniforms, {-1, 3, 2048}, {1.0, 0.9, 0.3});
}

TEST_CASE("ids at or above the vocabulary limit are never sampled") {
  SamplingOptions options;
  options.vocab_limit = 2;  // tokens 0 and 1 only: CDF 1/3, 1
  CHECK(sample(options, {0.2, 0.5, 0.999}) == std::vector<int64_t>{0, 1, 1});
  options.temperature = 0;
  CHECK(sample(options, {0.5}) == std::vector<int64_t>{1});
}

TEST_CASE("sampled frequencies follow the distribution") {
  torch::manual_seed(17);
  const torch::Tensor uniforms = torch::rand({20000}, torch::kFloat64);
  const torch::Tensor tokens = sample_next_tokens(four_logits(20000), SamplingOptions{}, uniforms);
  const torch::Tensor frequencies = torch::bincount(tokens, {}, 4).to(torch::kDouble) / 20000.0;
  const torch::Tensor expected = torch::tensor({0.1, 0.2, 0.3, 0.4}, torch::kDouble);
  CHECK((frequencies - expected).abs().max().item<double>() < 0.015);
}
