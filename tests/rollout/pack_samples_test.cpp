// pack_samples: prompts left-padded, responses right-padded, masks exact.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/rollout/generation.hpp"

using namespace meshrun;

TEST_CASE("samples pack into left-padded prompts and right-padded responses") {
  std::vector<GeneratedSample> samples(2);
  samples[0].prompt = {1, 2, 3};
  samples[0].response = {4};
  samples[1].prompt = {5};
  samples[1].response = {6, 7, 8};
  const SequenceBatch batch = pack_samples(samples, 0);
  CHECK(batch.prompt_len == 3);
  CHECK(batch.response_len == 3);
  CHECK(torch::equal(batch.sequences, torch::tensor({1, 2, 3, 4, 0, 0, 0, 0, 5, 6, 7, 8}, torch::kInt64).view({2, 6})));
  CHECK(torch::equal(batch.attention_mask, torch::tensor({1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1}, torch::kInt64).view({2, 6})));
  CHECK(torch::equal(batch.response_mask, torch::tensor({1, 0, 0, 1, 1, 1}, torch::kInt64).view({2, 3})));
}
