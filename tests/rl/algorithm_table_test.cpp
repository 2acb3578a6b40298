// Walks the algorithm table (include/meshrun/recipe/algorithms.hpp): every
// enum value has one row with a doc; every row is a schema choice of its
// key and documented there; every row dispatches (its arithmetic runs); and
// every need a row declares is enforced by a lint rule.
#include "tests/dist/torch_doctest.hpp"

#include <map>
#include <set>

#include "meshrun/recipe/algorithms.hpp"
#include "meshrun/rl/math.hpp"
#include "meshrun/recipe/schema.hpp"
#include "src/rl/experience.hpp"
#include "tests/rl/trajectory_batch_of.hpp"
#include "tests/recipe/diagnostic_matchers.hpp"

using namespace meshrun;

namespace {

// Rows are unique by id and name, and every one is documented.
template <class Row, std::size_t N>
void check_rows(const Row (&rows)[N], int enum_count) {
  std::set<int> ids;
  std::set<std::string_view> names;
  for (const Row& row : rows) {
    CAPTURE(row.name);
    CHECK(ids.insert(static_cast<int>(row.id)).second);
    CHECK(names.insert(row.name).second);
    CHECK(row.doc.size() > 10);
    CHECK(&row_of(rows, row.id) == &row);
    CHECK(row_named(rows, row.name) == &row);
  }
  CHECK(static_cast<int>(ids.size()) == enum_count);
  CHECK(row_named(rows, "no-such-row") == nullptr);
}

// The schema key offers exactly the rows' names and documents each.
template <class Row, std::size_t N>
void check_schema_key(const char* key, const Row (&rows)[N]) {
  CAPTURE(key);
  const KeySpec* spec = recipe_schema().find_key(key);
  REQUIRE(spec);
  REQUIRE(spec->choices.size() == N);
  for (std::size_t i = 0; i < N; ++i) {
    CHECK(spec->choices[i] == rows[i].name);
    CHECK(spec->doc.find(std::string(rows[i].doc)) != std::string::npos);
  }
}

constexpr const char* kPpo = R"(algorithm = "ppo"
[launch]
procs_per_node = 2
[roles.actor]
model = "builtin:tiny"
[roles.reward]
model = "builtin:tiny"
[data]
path = "prompts"
)";

}  // namespace

TEST_CASE("every enum value has one documented row") {
  check_rows(kAlgorithms, 4);
  check_rows(kAdvantageEstimators, 6);
  check_rows(kPolicyLosses, 2);
  check_rows(kLossAggregations, 4);
  check_rows(kKlModes, 2);
  check_rows(kKlEstimators, 3);
  check_rows(kDpoLosses, 2);
  check_rows(kLossTurns, 2);
  CHECK(name_of(AdvantageEstimator::group_mean) == "group_mean");
  CHECK(name_of(LossAggregation::seq_mean_token_sum_norm) == "seq-mean-token-sum-norm");
}

TEST_CASE("the schema's choices and docs come from the table") {
  check_schema_key("algorithm", kAlgorithms);
  check_schema_key("ppo.advantage", kAdvantageEstimators);
  check_schema_key("ppo.policy_loss", kPolicyLosses);
  check_schema_key("ppo.loss_agg", kLossAggregations);
  check_schema_key("ppo.kl_mode", kKlModes);
  check_schema_key("ppo.kl_estimator", kKlEstimators);
  check_schema_key("dpo.loss", kDpoLosses);
  check_schema_key("data.loss_turns", kLossTurns);
  // A recipe's name becomes the row's enum.
  for (const AdvantageRow& row : kAdvantageEstimators) {
    auto loaded = test::load_text(kPpo, {"ppo.advantage=" + std::string(row.name)});
    REQUIRE(loaded.recipe);
    CHECK(loaded.recipe->ppo.advantage == row.id);
  }
  for (const LossAggregationRow& row : kLossAggregations) {
    auto loaded = test::load_text(kPpo, {"ppo.loss_agg=" + std::string(row.name)});
    REQUIRE(loaded.recipe);
    CHECK(loaded.recipe->ppo.loss_agg == row.id);
  }
}

TEST_CASE("every advantage row dispatches in experience building") {
  using namespace ppo_detail;
  const TrajectoryBatch rollout =
      test::trajectory_batch_of(torch::ones({4, 3}, torch::kInt64), torch::ones({4}),
                                torch::tensor({1.0f, 0.0f, 0.5f, 0.1f}));
  Scores scores;
  scores.old_log_probs = torch::zeros({4, 3});
  scores.ref_log_probs = torch::zeros({4, 3});
  scores.values = torch::full({4, 3}, 0.5);
  std::map<std::string_view, torch::Tensor> advantages;
  for (const AdvantageRow& row : kAdvantageEstimators) {
    CAPTURE(row.name);
    ExperienceOptions options;
    options.advantage = row.id;
    options.group_size = 2;
    const Experience experience = make_experience(rollout, scores, options, nullptr);
    CHECK(torch::isfinite(experience.advantages).all().item<bool>());
    advantages[row.name] = experience.advantages;
  }
  // gae uses the values; group_norm and group_mean differ in scale. rloo and
  // reinforce_baseline differ only by the factor n / (n - 1) before
  // whitening, so they agree after it (each row's exact values:
  // reference_test.cpp).
  CHECK_FALSE(torch::allclose(advantages["gae"], advantages["reinforce"]));
  CHECK_FALSE(torch::allclose(advantages["group_norm"], advantages["group_mean"]));
  CHECK_FALSE(torch::allclose(advantages["reinforce"], advantages["reinforce_baseline"]));
  CHECK(torch::allclose(advantages["rloo"], advantages["reinforce_baseline"], 1e-5, 1e-6));
}

TEST_CASE("every policy loss and aggregation row dispatches") {
  const torch::Tensor mask = torch::ones({2, 3});
  for (const PolicyLossRow& row : kPolicyLosses) {
    PolicyLossOptions options;
    options.kind = row.id;
    const PolicyLossTerms terms = policy_loss(torch::full({2, 3}, -1.0), torch::full({2, 3}, -1.2), torch::ones({2, 3}),
                                              mask, options);
    CHECK(terms.loss.sizes() == mask.sizes());
    if (row.sequence_ratio) CHECK(terms.ratio.select(1, 0).equal(terms.ratio.select(1, 2)));
  }
  for (const LossAggregationRow& row : kLossAggregations)
    CHECK(loss_weights(mask, row.id, 3).sum().item<double>() > 0);
}

TEST_CASE("every need a row declares is a lint rule") {
  for (const AdvantageRow& row : kAdvantageEstimators) {
    CAPTURE(row.name);
    const std::string advantage = "ppo.advantage=" + std::string(row.name);
    auto single = test::validate_text(kPpo, {advantage, "batch.n_samples_per_prompt=1"});
    REQUIRE(single.recipe);
    CHECK(test::has_rule(single.diagnostics, "roles.critic-required") == row.needs_critic);
    CHECK(test::has_rule(single.diagnostics, "batch.group-samples") == row.needs_groups);
  }
  for (const AlgorithmRow& row : kAlgorithms) {
    CAPTURE(row.name);
    auto sp = test::validate_text(kPpo, {"algorithm=" + std::string(row.name), "mesh.sp=2"});
    REQUIRE(sp.recipe);
    CHECK(test::has_rule(sp.diagnostics, "mesh.sp-unsupported") == !row.sequence_parallel);
    // Side roles (critic, reward, ref) are a warning where the algorithm does not use them.
    CHECK(test::has_rule(sp.diagnostics, "roles.unused") == !row.uses_side_roles);
    // A reference computed with the actor is used, and takes no processes of its own.
    auto with_ref = test::validate_text(kPpo, {"algorithm=" + std::string(row.name), "roles.ref.model=builtin:tiny"});
    REQUIRE(with_ref.recipe);
    bool ref_unused = false;
    for (const auto& d : test::with_rule(with_ref.diagnostics, "roles.unused"))
      ref_unused = ref_unused || d.message.find("role ref ") != std::string::npos;
    CHECK(ref_unused == !(row.uses_side_roles || row.ref_with_actor));
  }
}
