// The fused LM head (fused_head, LlamaModel::forward_log_probs) against
// at::linear followed by the unfused vocab-parallel log-probs / entropy /
// cross-entropy: values and gradients to the hidden states and the head
// weight, one chunk (logits kept) and many (recomputed in backward), fp32
// within 1e-5 and bf16 within its rounding, ignored labels, temperature,
// a frozen weight, bad labels; and the model path with tied and untied
// heads from a response's first column; SFT's fused loss sum likewise. (tp-split vocabularies: the
// model_worker's check_fused_head, tensor_parallel_test.cpp.)
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/model/model.hpp"
#include "model/model_fixtures.hpp"

using namespace meshrun;

namespace {

struct HeadCase {
  torch::Tensor hidden, weight, labels;
};

HeadCase head_case(torch::ScalarType dtype, int64_t vocab = 50) {
  torch::manual_seed(3);
  HeadCase c;
  c.hidden = torch::randn({3, 7, 16}).to(dtype).requires_grad_();
  c.weight = (torch::randn({vocab, 16}) * 0.5).to(dtype).requires_grad_();
  c.labels = torch::randint(vocab, {3, 7}, torch::kInt64);
  c.labels[0][2] = -100;
  c.labels[2][6] = -100;
  return c;
}

// The largest difference, relative to the largest magnitude where that
// exceeds 1 (so bf16's rounding, relative, is judged fairly).
double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor expected = b.to(torch::kFloat);
  const double scale = std::max(1.0, expected.abs().max().item<double>());
  return (a.to(torch::kFloat) - expected).abs().max().item<double>() / scale;
}

// Fused and unfused heads on copies of one case; returns the worst
// difference over log-probs, entropy and both gradients.
double compare_heads(torch::ScalarType dtype, double temperature, int64_t chunk_bytes, bool entropy,
                     double softcap = 0) {
  HeadCase fused = head_case(dtype), plain = head_case(dtype);
  FusedHeadOptions options;
  options.temperature = temperature;
  options.entropy = entropy;
  options.chunk_bytes = chunk_bytes;
  options.logit_softcap = softcap;
  const HeadOutputs got = fused_head(fused.hidden, fused.weight, fused.labels, nullptr, options);
  torch::Tensor logits = at::linear(plain.hidden, plain.weight);
  if (softcap > 0) logits = (logits / softcap).tanh() * softcap;
  if (temperature != 1.0) logits = logits / temperature;
  const torch::Tensor ignored = plain.labels.eq(-100);
  const torch::Tensor expected =
      vocab_parallel_log_probs(logits, plain.labels.clamp_min(0), nullptr).masked_fill(ignored, 0);
  torch::manual_seed(8);
  const torch::Tensor weights = torch::randn({3, 7});
  double worst = max_difference(got.log_probs, expected);
  torch::Tensor fused_objective = (got.log_probs * weights).sum();
  torch::Tensor plain_objective = (expected * weights).sum();
  if (entropy) {
    const torch::Tensor expected_entropy = vocab_parallel_entropy(logits, nullptr);
    worst = std::max(worst, max_difference(got.entropy, expected_entropy));
    fused_objective = fused_objective - 0.5 * got.entropy.sum();
    plain_objective = plain_objective - 0.5 * expected_entropy.sum();
  } else {
    CHECK_FALSE(got.entropy.defined());
  }
  fused_objective.backward();
  plain_objective.backward();
  worst = std::max(worst, max_difference(fused.hidden.grad(), plain.hidden.grad()));
  worst = std::max(worst, max_difference(fused.weight.grad(), plain.weight.grad()));
  return worst;
}

}  // namespace

TEST_CASE("fused head: log-probs, entropy and gradients equal the unfused head's in fp32") {
  // 4 bytes × 50 logits a row: 200 bytes hold 1 row, 1 200 hold 6 (the
  // last chunk short), 0 the default (every row in one chunk, kept).
  for (const int64_t chunk_bytes : {int64_t{200}, int64_t{1200}, int64_t{0}}) {
    for (const double temperature : {1.0, 0.6}) {
      for (const bool entropy : {false, true}) {
        CAPTURE(chunk_bytes);
        CAPTURE(temperature);
        CAPTURE(entropy);
        CHECK(compare_heads(torch::kFloat, temperature, chunk_bytes, entropy) < 1e-5);
      }
    }
  }
}

TEST_CASE("fused head: soft-capped logits (Gemma 2's final_logit_softcapping), values and gradients") {
  // A cap of 1.5 on logits of a few units: tanh far from linear.
  for (const int64_t chunk_bytes : {int64_t{200}, int64_t{0}}) {
    for (const double temperature : {1.0, 0.6}) {
      for (const bool entropy : {false, true}) {
        CAPTURE(chunk_bytes);
        CAPTURE(temperature);
        CAPTURE(entropy);
        CHECK(compare_heads(torch::kFloat, temperature, chunk_bytes, entropy, 1.5) < 1e-5);
      }
    }
  }
  for (const int64_t chunk_bytes : {int64_t{200}, int64_t{0}}) {
    HeadCase fused = head_case(torch::kFloat), plain = head_case(torch::kFloat);
    FusedHeadOptions options;
    options.chunk_bytes = chunk_bytes;
    options.logit_softcap = 1.5;
    const torch::Tensor got = fused_head_loss_sum(fused.hidden, fused.weight, fused.labels, nullptr, options);
    const torch::Tensor capped = (at::linear(plain.hidden, plain.weight) / 1.5).tanh() * 1.5;
    const torch::Tensor expected = vocab_parallel_cross_entropy(capped, plain.labels, nullptr).sum();
    CHECK(max_difference(got, expected) < 1e-5);
    got.backward();
    expected.backward();
    CHECK(max_difference(fused.hidden.grad(), plain.hidden.grad()) < 1e-5);
    CHECK(max_difference(fused.weight.grad(), plain.weight.grad()) < 1e-5);
  }
}

TEST_CASE("fused head: bf16 within bf16's rounding") {
  for (const int64_t chunk_bytes : {int64_t{1200}, int64_t{0}}) {
    CAPTURE(chunk_bytes);
    CHECK(compare_heads(torch::kBFloat16, 1.0, chunk_bytes, true) < 1e-2);
  }
}

TEST_CASE("fused head: the cross-entropy is its negated log-prob; a frozen weight gets no gradient") {
  HeadCase fused = head_case(torch::kFloat), plain = head_case(torch::kFloat);
  fused.weight = fused.weight.detach();
  FusedHeadOptions options;
  options.chunk_bytes = 800;
  const torch::Tensor loss = -fused_head(fused.hidden, fused.weight, fused.labels, nullptr, options).log_probs;
  const torch::Tensor expected = vocab_parallel_cross_entropy(at::linear(plain.hidden, plain.weight.detach()),
                                                              plain.labels, nullptr);
  CHECK(max_difference(loss, expected) < 1e-5);
  loss.sum().backward();
  expected.sum().backward();
  CHECK(max_difference(fused.hidden.grad(), plain.hidden.grad()) < 1e-5);
  CHECK_FALSE(fused.weight.grad().defined());
  // Ignored positions give 0 and send nothing back.
  CHECK(loss[0][2].item<float>() == 0.0f);
}

TEST_CASE("fused head: an entropy without gradient is a figure only") {
  HeadCase fused = head_case(torch::kFloat), plain = head_case(torch::kFloat);
  FusedHeadOptions options;
  options.entropy = true;
  options.entropy_gradient = false;
  const HeadOutputs got = fused_head(fused.hidden, fused.weight, fused.labels, nullptr, options);
  CHECK(max_difference(got.entropy, vocab_parallel_entropy(at::linear(plain.hidden, plain.weight), nullptr)) < 1e-5);
  (got.log_probs.sum() + got.entropy.sum()).backward();
  const torch::Tensor ignored = plain.labels.eq(-100);
  vocab_parallel_log_probs(at::linear(plain.hidden, plain.weight), plain.labels.clamp_min(0), nullptr)
      .masked_fill(ignored, 0)
      .sum()
      .backward();
  CHECK(max_difference(fused.hidden.grad(), plain.hidden.grad()) < 1e-5);
  CHECK(max_difference(fused.weight.grad(), plain.weight.grad()) < 1e-5);
}

TEST_CASE("fused head's loss sum: SFT's summed cross-entropy and its gradients, chunked or not, and without") {
  for (const int64_t chunk_bytes : {int64_t{200}, int64_t{1200}, int64_t{0}}) {
    for (const torch::ScalarType dtype : {torch::kFloat, torch::kBFloat16}) {
      CAPTURE(chunk_bytes);
      CAPTURE(dtype);
      const double tolerance = dtype == torch::kFloat ? 1e-5 : 1e-2;
      HeadCase fused = head_case(dtype), plain = head_case(dtype);
      FusedHeadOptions options;
      options.chunk_bytes = chunk_bytes;
      const torch::Tensor got = fused_head_loss_sum(fused.hidden, fused.weight, fused.labels, nullptr, options);
      const torch::Tensor expected =
          vocab_parallel_cross_entropy(at::linear(plain.hidden, plain.weight), plain.labels, nullptr).sum();
      CHECK(got.dim() == 0);
      CHECK(max_difference(got, expected) < tolerance);
      // The backward's scalar scales the gradients made in forward.
      (got * 3.5).backward();
      (expected * 3.5).backward();
      CHECK(max_difference(fused.hidden.grad(), plain.hidden.grad()) < tolerance);
      CHECK(max_difference(fused.weight.grad(), plain.weight.grad()) < tolerance);
    }
  }
  // Evaluation: no gradient recorded, the same sum.
  HeadCase c = head_case(torch::kFloat);
  torch::NoGradGuard no_grad;
  const torch::Tensor evaluated = fused_head_loss_sum(c.hidden, c.weight, c.labels, nullptr);
  CHECK_FALSE(evaluated.requires_grad());
  CHECK(max_difference(evaluated, vocab_parallel_cross_entropy(at::linear(c.hidden, c.weight), c.labels, nullptr).sum()) <
        1e-5);
}

TEST_CASE("fused head: labels outside the vocabulary and mismatched shapes are refused") {
  HeadCase c = head_case(torch::kFloat);
  c.labels[1][1] = 50;
  CHECK_THROWS_WITH_AS(fused_head(c.hidden, c.weight, c.labels, nullptr), doctest::Contains("outside the vocabulary"),
                       ModelInputError);
  CHECK_THROWS_AS(fused_head(c.hidden, c.weight, c.labels.narrow(1, 0, 3), nullptr), std::logic_error);
  CHECK_THROWS_WITH_AS(fused_head_loss_sum(c.hidden, c.weight, c.labels, nullptr),
                       doctest::Contains("outside the vocabulary"), ModelInputError);
}

TEST_CASE("LlamaModel::forward_log_probs equals forward() then the log-probs, tied and untied, from a column") {
  for (const bool tied : {false, true}) {
    CAPTURE(tied);
    ModelOptions options;
    options.config = model_test::small_config();
    options.config.vocab = 40;
    options.config.tied_embeddings = tied;
    torch::manual_seed(21);
    LlamaModel fused(options);
    torch::manual_seed(21);
    LlamaModel plain(options);
    torch::manual_seed(4);
    ModelInputs inputs;
    inputs.input_ids = torch::randint(40, {2, 10}, torch::kInt64);
    inputs.attention_mask = torch::ones({2, 10}, torch::kInt64);
    inputs.attention_mask[0][0] = 0;  // left padding
    const torch::Tensor labels = torch::randint(40, {2, 4}, torch::kInt64);
    FusedHeadOptions head;
    head.entropy = true;
    head.chunk_bytes = 2 * 4 * 40;
    const HeadOutputs got = fused->forward_log_probs(inputs, labels, head, 5);
    const torch::Tensor logits = plain->forward(inputs).narrow(1, 5, 4);
    const torch::Tensor expected = vocab_parallel_log_probs(logits, labels, nullptr);
    const torch::Tensor entropy = vocab_parallel_entropy(logits, nullptr);
    CHECK(max_difference(got.log_probs, expected) < 1e-5);
    CHECK(max_difference(got.entropy, entropy) < 1e-5);
    (got.log_probs.sum() + got.entropy.sum()).backward();
    (expected.sum() + entropy.sum()).backward();
    auto plain_parameters = plain->named_parameters();
    for (const auto& item : fused->named_parameters()) {
      CAPTURE(item.key());
      CHECK(max_difference(item.value().grad(), plain_parameters[item.key()].grad()) < 1e-5);
    }
    CHECK_THROWS_AS(fused->forward_log_probs(inputs, labels, head, 7), std::logic_error);
    // SFT's summed loss over every column, an ignored label among them.
    for (auto& item : fused->named_parameters()) item.value().mutable_grad() = torch::Tensor();
    for (auto& item : plain->named_parameters()) item.value().mutable_grad() = torch::Tensor();
    torch::Tensor sft_labels = torch::randint(40, {2, 10}, torch::kInt64);
    sft_labels[1][4] = -100;
    const torch::Tensor loss = fused->forward_loss_sum(inputs, sft_labels, head);
    const torch::Tensor reference = vocab_parallel_cross_entropy(plain->forward(inputs), sft_labels, nullptr).sum();
    CHECK(max_difference(loss, reference) < 1e-5);
    loss.backward();
    reference.backward();
    for (const auto& item : fused->named_parameters()) {
      CAPTURE(item.key());
      CHECK(max_difference(item.value().grad(), plain_parameters[item.key()].grad()) < 1e-5);
    }
  }
}
