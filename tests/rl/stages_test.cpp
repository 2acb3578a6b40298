// The RL step's stages in one process, without launching workers
// (src/rl/{rollouts,scoring,experience,updates}.hpp): the trajectory's
// tensors, Experience's pure arithmetic over loss masks and per-token
// rewards, dynamic sampling's group picking, and Rollouts → Scoring →
// Experience → Updates on builtin:tiny in a world of one process.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/data/data.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/hooks/hooks.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "src/rl/experience.hpp"
#include "src/rl/roles.hpp"
#include "src/rl/rollouts.hpp"
#include "src/rl/scoring.hpp"
#include "src/rl/updates.hpp"
#include "support/temp_dir.hpp"
#include "tests/dist/world_of_one.hpp"
#include <fstream>
#include <random>

using namespace meshrun;
using namespace meshrun::ppo_detail;

namespace stages_test {

// A trajectory with `length` response tokens (ids 1..length after a
// two-token prompt), behaviour log-probs -0.5 each.
Trajectory trajectory_of(int64_t length, double reward = 0) {
  Trajectory out;
  out.sample.prompt = {7, 8};
  for (int64_t t = 0; t < length; ++t) {
    out.sample.response.push_back(static_cast<int32_t>(t + 1));
    out.sample.log_probs.push_back(-0.5f);
  }
  out.hook_reward = reward;
  return out;
}

TrajectoryBatch batch_of(std::vector<Trajectory> trajectories) {
  TrajectoryBatch batch;
  batch.trajectories = std::move(trajectories);
  batch.pack(0, torch::kCPU);
  return batch;
}

Scores zero_scores(const TrajectoryBatch& batch) {
  const auto shape = std::vector<int64_t>{batch.size(), batch.packed.response_len};
  return Scores{torch::zeros(shape), torch::zeros(shape), torch::zeros(shape)};
}

double value_at(const torch::Tensor& tensor, int64_t row, int64_t column) {
  return tensor.index({row, column}).item<double>();
}

}  // namespace stages_test

using namespace stages_test;

TEST_CASE("a trajectory batch's loss mask is response × the policy's tokens × kept") {
  std::vector<Trajectory> trajectories = {trajectory_of(3), trajectory_of(2), trajectory_of(3)};
  trajectories[0].loss_mask = {1, 0, 1};  // the middle token came from an environment
  trajectories[2].kept = false;
  trajectories[1].model_reward = 0.25;
  trajectories[1].hook_reward = 1.0 / 3.0;
  const TrajectoryBatch batch = batch_of(trajectories);
  CHECK(torch::equal(batch.loss_mask(), torch::tensor({{1.0f, 0.0f, 1.0f}, {1.0f, 1.0f, 0.0f}, {0.0f, 0.0f, 0.0f}})));
  CHECK(torch::equal(batch.kept(), torch::tensor({1.0f, 1.0f, 0.0f})));
  // Rewards travel as float, as the exchange shares them.
  CHECK(batch.hook_rewards()[1].item<float>() == static_cast<float>(1.0 / 3.0));
  CHECK(batch.model_rewards()[1].item<float>() == 0.25f);
  CHECK_FALSE(batch.has_token_rewards());

  TrajectoryBatch wrong = batch_of({trajectory_of(2)});
  wrong.trajectories[0].loss_mask = {1};
  CHECK_THROWS_AS(wrong.loss_mask(), std::logic_error);
}

TEST_CASE("experience leaves tokens outside the loss mask out of KL and advantages; returns flow across them") {
  std::vector<Trajectory> trajectories = {trajectory_of(3, 1.0), trajectory_of(3, 1.0)};
  trajectories[1].loss_mask = {1, 0, 1};
  const TrajectoryBatch batch = batch_of(trajectories);
  Scores scores = zero_scores(batch);
  scores.old_log_probs = torch::full({2, 3}, -1.0f);
  scores.ref_log_probs = torch::full({2, 3}, -1.5f);
  ExperienceOptions options;
  options.advantage = AdvantageEstimator::reinforce;
  options.has_ref = true;
  options.kl_coef_in_reward = 0.1;
  options.gamma = 1.0;
  const Experience experience = make_experience(batch, scores, options, nullptr);
  CHECK(torch::equal(experience.response_mask, batch.loss_mask()));
  // k1 = 0.5 per token in the loss: 3 + 2 tokens.
  CHECK(experience.kl == doctest::Approx(0.5));
  CHECK(experience.kl_sum_per_sample == doctest::Approx((1.5 + 1.0) / 2));
  CHECK(value_at(experience.advantages, 1, 1) == 0.0);
  // REINFORCE with γ 1: returns are the reward-to-go over the whole
  // response, the tokens outside the loss adding no KL penalty (its
  // advantages are these on the loss's tokens, whitened).
  CHECK(value_at(experience.returns, 0, 0) == doctest::Approx(1.0 - 3 * 0.05));
  CHECK(value_at(experience.returns, 1, 0) == doctest::Approx(1.0 - 2 * 0.05));
}

TEST_CASE("experience adds a trajectory's per-token rewards to its token rewards") {
  std::vector<Trajectory> trajectories = {trajectory_of(3, 1.0), trajectory_of(3, 1.0)};
  trajectories[0].token_rewards = {0.5f, 0.0f, -0.25f};
  const TrajectoryBatch batch = batch_of(trajectories);
  REQUIRE(batch.has_token_rewards());
  ExperienceOptions options;
  options.advantage = AdvantageEstimator::reinforce;
  const Experience with = make_experience(batch, zero_scores(batch), options, nullptr);
  CHECK(value_at(with.returns, 0, 0) == doctest::Approx(1.25));
  CHECK(value_at(with.returns, 0, 1) == doctest::Approx(0.75));
  CHECK(value_at(with.returns, 0, 2) == doctest::Approx(0.75));
  CHECK(value_at(with.returns, 1, 0) == doctest::Approx(1.0));
}

TEST_CASE("dynamic sampling keeps informative groups, fills with uninformative ones kept out of the loss") {
  GroupPicker picker(2, 2);
  // Round 1: group 0 informative, group 1 all equal.
  picker.add_round(batch_of({trajectory_of(1, 1.0), trajectory_of(1, 0.0), trajectory_of(1, 0.5),
                             trajectory_of(1, 0.5)}));
  CHECK_FALSE(picker.full());
  // Round 2: group 0 equal once its dropped sample is left out; group 1 informative.
  std::vector<Trajectory> second = {trajectory_of(2, 1.0), trajectory_of(2, 0.0), trajectory_of(2, 0.0),
                                    trajectory_of(2, 1.0)};
  second[0].kept = false;
  picker.add_round(batch_of(second));
  CHECK(picker.full());
  std::vector<Trajectory> picked = picker.take();
  REQUIRE(picked.size() == 4);
  CHECK(picked[0].hook_reward == 1.0);
  CHECK(picked[2].response_length() == 2);
  CHECK(picker.stats().rounds == 2);
  CHECK(picker.stats().kept_groups == 2);
  CHECK(picker.stats().dropped_groups == 2);

  GroupPicker short_of(2, 2);
  short_of.add_round(batch_of({trajectory_of(1, 1.0), trajectory_of(1, 0.0), trajectory_of(1, 0.5),
                               trajectory_of(1, 0.5)}));
  std::vector<Trajectory> filled = short_of.take();
  REQUIRE(filled.size() == 4);
  CHECK(short_of.stats().kept_groups == 1);
  CHECK(filled[0].kept);
  CHECK_FALSE(filled[2].kept);  // the filler weighs nothing
  CHECK_FALSE(filled[3].kept);
}

namespace stages_test {

constexpr std::string_view kTinyPpo = R"(algorithm = "ppo"
seed = 5
[launch]
procs_per_node = 1
device = "cpu"
backend = "gloo"
timeout_minutes = 0.5
[batch]
rollout = 2
n_samples_per_prompt = 2
train = 4
micro_train = 4
micro_rollout = 4
[roles.actor]
model = "builtin:tiny"
dtype = "fp32"
learning_rate = 0.01
[roles.ref]
model = "builtin:tiny"
dtype = "fp32"
[colocate]
all = true
[rollout]
engines = 1
max_prompt_len = 8
max_new_tokens = 6
[ppo]
advantage = "group_norm"
[data]
tokenizer = "builtin:bytes"
)";

}  // namespace stages_test

TEST_CASE("the stages run a step in one process: trajectories, scores, experience, an update, new weights") {
  Diagnostics diagnostics;
  const auto recipe = load_recipe_text(kTinyPpo, "tiny.toml", {}, diagnostics);
  REQUIRE_MESSAGE(recipe, diagnostics.format());
  const Plan plan = make_plan(*recipe, ClusterShape::from_recipe(*recipe), diagnostics);
  REQUIRE_MESSAGE(!diagnostics.has_errors(), diagnostics.format());
  CHECK(plan.rl.enabled);
  CHECK(plan.rl.advantage == AdvantageEstimator::group_norm);
  CHECK(plan.rl.has_ref);
  CHECK_FALSE(plan.rl.has_critic);

  auto runtime = test::world_of_one();
  runtime->build_groups(plan);
  DataTokenizer tokenizer = load_data_tokenizer(recipe->data, "builtin:tiny");
  PromptDataset prompts;
  for (const char* text : {"ab:", "xyz:"}) {
    Prompt prompt;
    prompt.line = 1;
    prompt.ids = tokenizer.tokenizer->encode(text, false);
    prompts.prompts.push_back(std::move(prompt));
  }

  RoleSlots roles;
  roles.build(plan, *runtime, torch::kCPU, 4);
  REQUIRE(roles.find(Role::actor));
  REQUIRE(roles.find(Role::ref));
  CHECK(roles.find(Role::critic) == nullptr);
  Rollouts::Resources resources;
  resources.prompts = &prompts;
  resources.tokenizer = tokenizer.tokenizer.get();
  Rollouts rollouts(plan, runtime->world(), torch::kCPU, std::move(resources));
  rollouts.build_engines(*runtime);
  Scoring scoring(plan, roles, runtime->world(), torch::kCPU, HookResources{}, "");
  Updates updates(plan, roles, torch::kCPU);

  int64_t generated = 0;
  TrajectoryBatch batch = rollouts.generate({0, 1}, 1, 0, generated);
  REQUIRE(batch.size() == 4);
  CHECK(generated > 0);
  for (size_t i = 0; i < 4; ++i) {
    const Trajectory& trajectory = batch.trajectories[i];
    CAPTURE(i);
    CHECK(trajectory.prompt_row == static_cast<int64_t>(i / 2));
    CHECK(trajectory.sample.prompt == prompts.prompts[i / 2].ids);
    CHECK(trajectory.policy_version == 0);
    CHECK(trajectory.behaviour_log_probs().size() == trajectory.sample.response.size());
    CHECK(trajectory.response_length() <= 6);
  }
  // A reward hook sees each trajectory's ids and its prompt's label.
  {
    test::TempDir folder;
    const std::string script = (folder.path() / "reward.lua").string();
    std::ofstream(script) << "function reward(batch)\n  local out = {}\n"
                             "  for i = 1, batch.size do out[i] = batch:label(i) * 10 + batch.response_len[i] end\n"
                             "  return out\nend\n";
    auto hooks = HookScript::load(script, HookOptions{});
    PromptDataset labelled = prompts;
    labelled.prompts[0].label = 1;
    labelled.prompts[1].label = 2;
    Scoring hooked(plan, roles, runtime->world(), torch::kCPU,
                   HookResources{hooks.get(), tokenizer.tokenizer.get(), &labelled, 2}, "reward");
    hooked.score_rewards(batch, 1);
    for (size_t i = 0; i < 4; ++i) {
      CAPTURE(i);
      CHECK(batch.trajectories[i].hook_reward ==
            static_cast<double>((i / 2 + 1) * 10 + batch.trajectories[i].response_length()));
      CHECK(batch.trajectories[i].model_reward == 0.0);
    }
  }
  // Rewards that differ within every group, so that group_norm teaches.
  for (size_t i = 0; i < 4; ++i) batch.trajectories[i].hook_reward = static_cast<double>(i % 2);
  scoring.score_rewards(batch, 1);  // no reward model or hook: the rewards stay as set
  CHECK(batch.trajectories[1].hook_reward == 1.0);

  const Scores scores = scoring.score(batch);
  // Actor and ref start from the same seed: the same log-probs, no KL; the
  // engine sampled with the same weights.
  CHECK(torch::allclose(scores.old_log_probs, scores.ref_log_probs));
  const Parity parity = logprob_parity(batch, scores.old_log_probs);
  CHECK(parity.tokens == generated);
  CHECK(parity.max < 1e-4);
  const Experience experience =
      make_experience(batch, scores, ExperienceOptions::of(plan.rl, plan.step, 0.0), nullptr);
  CHECK(experience.kl == doctest::Approx(0.0));

  const TrainSums sums = updates.train(batch, scores, experience, 1);
  CHECK(sums.actor_steps == 1);
  CHECK(sums.tokens_policy == static_cast<double>(generated));
  const Scores after = scoring.score(batch);
  CHECK_FALSE(torch::allclose(after.old_log_probs, scores.old_log_probs));
  // The ref is frozen.
  CHECK(torch::equal(after.ref_log_probs, scores.ref_log_probs));

  rollouts.sync_weights(roles, runtime->mesh(Role::actor), 1);
  CHECK(rollouts.policy_version() == 1);
  TrajectoryBatch next = rollouts.generate({0, 1}, 2, 0, generated);
  CHECK(next.trajectories[0].policy_version == 1);
  // The engine holds the updated actor: its behaviour log-probs are the actor's.
  const Scores scored_next = scoring.score(next);
  CHECK(logprob_parity(next, scored_next.old_log_probs).max < 1e-4);
  runtime->shutdown();
}

TEST_CASE("one optimizer step per rollout: the update's own forward gives the old log-probs, and the same update") {
  Diagnostics diagnostics;
  const auto recipe = load_recipe_text(kTinyPpo, "tiny.toml", {Override{"ppo.kl_mode=\"loss\""}}, diagnostics);
  REQUIRE_MESSAGE(recipe, diagnostics.format());
  const Plan plan = make_plan(*recipe, ClusterShape::from_recipe(*recipe), diagnostics);
  REQUIRE_MESSAGE(!diagnostics.has_errors(), diagnostics.format());
  REQUIRE(plan.rl.old_log_probs_from_training);
  Plan scored_plan = plan;  // the same step with the separate scoring forward
  scored_plan.rl.old_log_probs_from_training = false;

  auto runtime = test::world_of_one();
  runtime->build_groups(plan);
  DataTokenizer tokenizer = load_data_tokenizer(recipe->data, "builtin:tiny");
  PromptDataset prompts;
  for (const char* text : {"ab:", "xyz:"}) {
    Prompt prompt;
    prompt.line = 1;
    prompt.ids = tokenizer.tokenizer->encode(text, false);
    prompts.prompts.push_back(std::move(prompt));
  }
  Rollouts::Resources resources;
  resources.prompts = &prompts;
  resources.tokenizer = tokenizer.tokenizer.get();
  Rollouts rollouts(plan, runtime->world(), torch::kCPU, std::move(resources));
  rollouts.build_engines(*runtime);
  int64_t generated = 0;
  TrajectoryBatch batch = rollouts.generate({0, 1}, 1, 0, generated);
  for (size_t i = 0; i < 4; ++i) batch.trajectories[i].hook_reward = static_cast<double>(i % 2);

  // Two actors from the same seed: one trained each way.
  RoleSlots skipping, scoring_first;
  skipping.build(plan, *runtime, torch::kCPU, 4);
  scoring_first.build(scored_plan, *runtime, torch::kCPU, 4);
  Scoring skip_scoring(plan, skipping, runtime->world(), torch::kCPU, HookResources{}, "");
  Scoring full_scoring(scored_plan, scoring_first, runtime->world(), torch::kCPU, HookResources{}, "");
  const Scores skipped = skip_scoring.score(batch);
  const Scores scored = full_scoring.score(batch);
  CHECK(torch::count_nonzero(skipped.old_log_probs).item<int64_t>() == 0);  // no actor pass
  CHECK(torch::allclose(skipped.ref_log_probs, scored.ref_log_probs));

  const auto options = ExperienceOptions::of(plan.rl, plan.step, plan.rl.init_kl_coef);
  const Experience experience = make_experience(batch, scored, options, nullptr);
  const TrainSums by_training = Updates(plan, skipping, torch::kCPU).train(batch, skipped, experience, 1);
  const TrainSums by_scoring = Updates(scored_plan, scoring_first, torch::kCPU).train(batch, scored, experience, 1);
  // The training forward's log-probs are the scoring forward's.
  REQUIRE(by_training.actor_log_probs.defined());
  CHECK(torch::allclose(by_training.actor_log_probs, scored.old_log_probs * experience.response_mask, 1e-5, 1e-6));
  CHECK(logprob_parity(batch, by_training.actor_log_probs).max < 1e-4);
  CHECK(by_training.policy_loss == doctest::Approx(by_scoring.policy_loss).epsilon(1e-4));
  CHECK(by_training.clip == 0.0);
  // And the updated weights agree.
  const Scores after_training = full_scoring.score(batch);
  Scoring rescoring(scored_plan, skipping, runtime->world(), torch::kCPU, HookResources{}, "");
  const Scores after_skipping = rescoring.score(batch);
  CHECK_FALSE(torch::allclose(after_training.old_log_probs, scored.old_log_probs));
  CHECK(torch::allclose(after_skipping.old_log_probs, after_training.old_log_probs, 1e-4, 1e-5));
  runtime->shutdown();
}

TEST_CASE("the old log-probs come from training only when one optimizer step consumes the step and no KL is in the reward") {
  const auto plan_with = [](std::vector<Override> overrides) {
    Diagnostics diagnostics;
    const auto recipe = load_recipe_text(kTinyPpo, "tiny.toml", std::move(overrides), diagnostics);
    REQUIRE_MESSAGE(recipe, diagnostics.format());
    return make_plan(*recipe, ClusterShape::from_recipe(*recipe), diagnostics).rl.old_log_probs_from_training;
  };
  CHECK_FALSE(plan_with({}));  // kl_mode "reward" with a ref: Experience needs them first
  CHECK(plan_with({Override{"ppo.kl_mode=\"loss\""}}));
  CHECK_FALSE(plan_with({Override{"ppo.kl_mode=\"loss\""}, Override{"ppo.max_epochs=2"}}));
  CHECK_FALSE(plan_with({Override{"ppo.kl_mode=\"loss\""}, Override{"batch.train=2"}, Override{"batch.micro_train=2"}}));
}

TEST_CASE("the staleness bound: a trajectory more versions behind than max_staleness is never trained") {
  // A property over random versions: after enforce_staleness no kept
  // trajectory exceeds the bound, exactly the too-old kept ones were
  // dropped, and the figures match.
  std::mt19937_64 random(5);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t trainer = static_cast<int64_t>(random() % 20), bound = 1 + static_cast<int64_t>(random() % 4);
    TrajectoryBatch batch;
    int64_t expected_dropped = 0, expected_max = 0;
    double sum = 0;
    const int n = 1 + static_cast<int>(random() % 16);
    for (int i = 0; i < n; ++i) {
      Trajectory t = stages_test::trajectory_of(3);
      t.policy_version = std::max<int64_t>(0, trainer - static_cast<int64_t>(random() % 7));
      t.kept = random() % 5 != 0;
      const int64_t staleness = trainer - t.policy_version;
      if (t.kept && staleness > bound) ++expected_dropped;
      expected_max = std::max(expected_max, staleness);
      sum += static_cast<double>(staleness);
      batch.trajectories.push_back(t);
    }
    const StalenessStats stats = enforce_staleness(batch, trainer, bound);
    CHECK(stats.dropped == expected_dropped);
    CHECK(stats.max == expected_max);
    CHECK(stats.mean == doctest::Approx(sum / n));
    for (const Trajectory& t : batch.trajectories)
      if (t.kept) CHECK(trainer - t.policy_version <= bound);
  }
}
