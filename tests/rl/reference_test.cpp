// meshrun's RL arithmetic against an independent plain-PyTorch
// re-computation (tests/rl/reference_rl.py, run with the Python of the torch
// meshrun builds against): every advantage estimator through experience
// building (group statistics with a dropped sample, GAE, whitening), every
// policy-loss variant (PPO, clip-higher, dual clip, GSPO) per token, each
// under every loss aggregation with its gradient, and the overlong penalty.
#include "tests/dist/torch_doctest.hpp"

#include <cstdio>
#include <memory>

#include <nlohmann/json.hpp>

#include "meshrun/rl/math.hpp"
#include "src/rl/experience.hpp"
#include "tests/rl/trajectory_batch_of.hpp"

using namespace meshrun;
using nlohmann::json;

namespace {

const json& reference() {
  static const json cases = [] {
    const std::string command = std::string(MESHRUN_TORCH_PYTHON) + " -W ignore " + MESHRUN_SOURCE_DIR +
                                "/tests/rl/reference_rl.py";
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
    std::string text;
    char buffer[65536];
    size_t n;
    while (pipe && (n = fread(buffer, 1, sizeof buffer, pipe.get())) > 0) text.append(buffer, n);
    return json::parse(text, nullptr, false);
  }();
  REQUIRE_MESSAGE(cases.is_object(), "reference_rl.py printed no JSON");
  return cases;
}

torch::Tensor tensor_of(const json& rows) {
  std::vector<float> flat;
  int64_t columns = 0;
  for (const auto& row : rows) {
    if (row.is_array()) {
      columns = static_cast<int64_t>(row.size());
      for (const auto& value : row) flat.push_back(value.get<float>());
    } else {
      flat.push_back(row.get<float>());
    }
  }
  torch::Tensor out = torch::tensor(flat);
  return columns ? out.view({-1, columns}) : out;
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

PolicyLossOptions options_of(const json& variant) {
  PolicyLossOptions options;
  options.kind = row_named(kPolicyLosses, variant["kind"].get<std::string>())->id;
  options.clip_low = variant["low"].get<double>();
  options.clip_high = variant["high"].get<double>();
  options.dual_clip = variant["dual"].get<double>();
  return options;
}

}  // namespace

TEST_CASE("every advantage estimator matches the reference, a dropped sample left out of its group") {
  const json& ref = reference();
  using namespace ppo_detail;
  std::vector<float> keep;
  for (const auto& k : ref["keep"]) keep.push_back(k.get<float>());
  const torch::Tensor mask = tensor_of(ref["mask"]);
  const TrajectoryBatch rollout = test::trajectory_batch_of(mask, torch::tensor(keep), tensor_of(ref["rewards"]));
  Scores scores;
  scores.old_log_probs = torch::zeros_like(mask);
  scores.ref_log_probs = torch::zeros_like(mask);
  scores.values = tensor_of(ref["values"]);
  for (const AdvantageRow& row : kAdvantageEstimators) {
    CAPTURE(row.name);
    ExperienceOptions options;
    options.advantage = row.id;
    options.group_size = ref["group"].get<int64_t>();
    options.gamma = ref["gamma"].get<double>();
    options.lambd = ref["lambd"].get<double>();
    const Experience experience = make_experience(rollout, scores, options, nullptr);
    const torch::Tensor expected = tensor_of(ref["advantages"][std::string(row.name)]);
    CHECK(max_difference(experience.advantages, expected) < 2e-5);
  }
}

TEST_CASE("every policy loss variant matches the reference per token, aggregated, and in its gradient") {
  const json& ref = reference();
  const torch::Tensor mask = tensor_of(ref["mask"]);
  const torch::Tensor old = tensor_of(ref["old"]);
  const torch::Tensor advantages = tensor_of(ref["seq_adv"]);
  const int64_t max_new = ref["max_new"].get<int64_t>();
  for (const auto& [name, variant] : ref["variants"].items()) {
    CAPTURE(name);
    const PolicyLossOptions options = options_of(variant);
    const json& expected = ref["losses"][name];
    {
      const PolicyLossTerms terms = policy_loss(tensor_of(ref["log_probs"]), old, advantages, mask, options);
      CHECK(max_difference(terms.loss, tensor_of(expected["per_token"])) < 1e-5);
    }
    bool clipped_somewhere = false;
    for (const LossAggregationRow& aggregation : kLossAggregations) {
      CAPTURE(aggregation.name);
      torch::Tensor log_probs = tensor_of(ref["log_probs"]).requires_grad_();
      const PolicyLossTerms terms = policy_loss(log_probs, old, advantages, mask, options);
      clipped_somewhere = clipped_somewhere || terms.clipped.sum().item<double>() > 0;
      // Two micro-batches of rows with the batch's weights add up to the batch's loss.
      const torch::Tensor weights = loss_weights(mask, aggregation.id, max_new);
      const torch::Tensor loss = (terms.loss.narrow(0, 0, 3) * weights.narrow(0, 0, 3)).sum() +
                                 (terms.loss.narrow(0, 3, 5) * weights.narrow(0, 3, 5)).sum();
      const json& want = expected[std::string(aggregation.name)];
      CHECK(loss.item<double>() == doctest::Approx(want["value"].get<double>()).epsilon(1e-5));
      loss.backward();
      CHECK(max_difference(log_probs.grad(), tensor_of(want["grad"])) < 1e-5);
      CHECK(aggregate_loss(terms.loss.detach(), mask, aggregation.id, max_new).item<double>() ==
            doctest::Approx(want["value"].get<double>()).epsilon(1e-5));
    }
    CHECK(clipped_somewhere);
  }
}

TEST_CASE("the overlong penalty matches the reference") {
  const json& ref = reference();
  const torch::Tensor penalty = overlong_penalty(tensor_of(ref["lengths"]), ref["max_new"].get<int64_t>(), 2, 0.5);
  CHECK(max_difference(penalty, tensor_of(ref["overlong"])) < 1e-6);
  CHECK(overlong_penalty(tensor_of(ref["lengths"]), 6, 0, 0.5).abs().sum().item<double>() == 0);
}
