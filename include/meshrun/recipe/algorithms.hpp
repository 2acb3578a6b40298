// The algorithm table: every algorithm, advantage estimator, policy loss,
// loss aggregation, KL mode and KL estimator meshrun knows, as rows that say
// what each one needs. It is the recipe's vocabulary for these choices:
// the schema takes its allowed values and docs from here, lint derives its
// rules from the rows' needs, the planner and CLI dispatch on the enums, and
// experience building switches on a row's fields. Torch-free.
//
// Invariants: a row's `name` is what a recipe writes and is unique within
// its table; every enum value has exactly one row (tests walk the tables);
// adding an estimator is a row here, a `case` where the enum is switched on
// (the compiler names every switch that misses it) and a test.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace meshrun {

// A row that needs nothing beyond its name and doc.
template <class Id>
struct ChoiceRow {
  Id id;
  std::string_view name;
  std::string_view doc;
};

// ---- algorithms -----------------------------------------------------------

enum class Algorithm { sft, ppo, dpo, rm };

// Which JSONL keys a data line of the algorithm carries.
enum class DataShape {
  prompt_response,  // input + output, or messages (the last assistant message is the target)
  prompt,           // input, or messages (rendered with the generation prompt)
  preference,       // input (or messages) + chosen + rejected responses
};

struct AlgorithmRow {
  Algorithm id;
  std::string_view name;
  std::string_view doc;
  bool rollout_engines;  // generates with rollout engines each step
  bool reinforcement;    // [ppo] settings apply: advantages, policy losses, KL
  bool needs_reward;     // a reward model, reward hook or [hooks] script is required
  bool uses_side_roles;  // critic / reward / ref are meaningful (otherwise: unused, a warning)
  bool sequence_parallel;  // the runtime supports mesh sp > 1
  DataShape data;
  // [roles.ref] names a frozen reference computed on the actor's own
  // processes and mesh (it takes none of its own; without it the actor's
  // initial weights serve).
  bool ref_with_actor;
  // Training sequences per batch item: a preference pair is two.
  int sequences_per_item;
  // The trained actor ends in a scalar score head (a reward model), not
  // the language-model head.
  bool scalar_actor;
  // Evaluates on [data] eval_path every [train] eval_steps and at the end.
  bool evaluates;
  // The actor may train LoRA adapters ([roles.actor] lora_rank > 0).
  bool lora;
};

inline constexpr AlgorithmRow kAlgorithms[] = {
    {Algorithm::sft, "sft",
     "Supervised fine-tuning on prompt/response pairs or chats; the loss covers the response (in chats, the "
     "assistant turns data.loss_turns names).",
     false, false, false, false, true, DataShape::prompt_response, false, 1, false, true, true},
    {Algorithm::ppo, "ppo",
     "PPO and its REINFORCE/GRPO family: rollout engines sample responses to prompts, rewards and advantages "
     "are computed, and the actor (and critic) are updated.",
     true, true, true, true, true, DataShape::prompt, false, 1, false, false, true},
    {Algorithm::dpo, "dpo",
     "Direct preference optimisation on chosen/rejected pairs against a frozen reference ([roles.ref], or the "
     "actor's initial weights); batch.train counts pairs.",
     false, false, false, false, true, DataShape::preference, true, 2, false, true, true},
    {Algorithm::rm, "rm",
     "A Bradley-Terry reward model on chosen/rejected pairs: the actor gets a scalar score head and learns to "
     "score the chosen response higher; the output serves as a PPO [roles.reward] model.",
     false, false, false, false, true, DataShape::preference, false, 2, true, true, false},
};

// ---- SFT --------------------------------------------------------------------

// Which assistant turns of a chat sample SFT trains on.
enum class LossTurns { all, last };

using LossTurnsRow = ChoiceRow<LossTurns>;

inline constexpr LossTurnsRow kLossTurns[] = {
    {LossTurns::all, "all",
     "Every assistant turn (as the template's {% generation %} blocks mark it, else by rendering the "
     "conversation prefix by prefix)."},
    {LossTurns::last, "last", "Only the final assistant turn; earlier turns are prompt."},
};

// ---- preference losses ----------------------------------------------------

// How DPO turns the pair's log-ratio margin into a loss.
enum class DpoLoss { sigmoid, ipo };

using DpoLossRow = ChoiceRow<DpoLoss>;

inline constexpr DpoLossRow kDpoLosses[] = {
    {DpoLoss::sigmoid, "sigmoid",
     "-log σ(β·margin) (Rafailov et al.), with label_smoothing ε: -(1-ε)·log σ(β·m) - ε·log σ(-β·m) (cDPO)."},
    {DpoLoss::ipo, "ipo",
     "(margin - 1/(2β))² on per-token mean log-probabilities (Azar et al.; TRL's loss_type \"ipo\")."},
};

// ---- advantage estimators -------------------------------------------------

enum class AdvantageEstimator { gae, reinforce, rloo, group_norm, reinforce_baseline, group_mean };

// How a sample's scalar reward is compared with the other samples of its
// prompt before it becomes token rewards.
enum class GroupBaseline {
  none,
  leave_one_out,  // r - mean of the other samples (RLOO)
  mean_std,       // (r - mean) / (std + eps) (GRPO)
  mean,           // r - mean (REINFORCE++-baseline, Dr. GRPO)
};

struct AdvantageRow {
  AdvantageEstimator id;
  std::string_view name;
  std::string_view doc;
  bool needs_critic;      // values from a critic (GAE)
  bool needs_groups;      // n_samples_per_prompt ≥ 2
  GroupBaseline baseline;
  bool whiten;            // advantages whitened over the batch afterwards
};

inline constexpr AdvantageRow kAdvantageEstimators[] = {
    {AdvantageEstimator::gae, "gae", "Generalised advantage estimation with a critic's values, whitened over the batch.",
     true, false, GroupBaseline::none, true},
    {AdvantageEstimator::reinforce, "reinforce",
     "REINFORCE++: discounted returns of the token rewards, whitened over the batch.", false, false,
     GroupBaseline::none, true},
    {AdvantageEstimator::rloo, "rloo",
     "RLOO: each reward minus the mean of the other samples of its prompt, then whitened over the batch.", false,
     true, GroupBaseline::leave_one_out, true},
    {AdvantageEstimator::group_norm, "group_norm",
     "GRPO: each reward minus its prompt group's mean, divided by the group's standard deviation; not whitened.",
     false, true, GroupBaseline::mean_std, false},
    {AdvantageEstimator::reinforce_baseline, "reinforce_baseline",
     "REINFORCE++-baseline: each reward minus its prompt group's mean, then whitened over the batch.", false, true,
     GroupBaseline::mean, true},
    {AdvantageEstimator::group_mean, "group_mean",
     "Dr. GRPO: each reward minus its prompt group's mean, without dividing by the standard deviation; not "
     "whitened.",
     false, true, GroupBaseline::mean, false},
};

// ---- policy losses --------------------------------------------------------

enum class PolicyLoss { ppo, gspo };

struct PolicyLossRow {
  PolicyLoss id;
  std::string_view name;
  std::string_view doc;
  bool sequence_ratio;  // one importance ratio per sequence instead of per token
};

inline constexpr PolicyLossRow kPolicyLosses[] = {
    {PolicyLoss::ppo, "ppo", "PPO's clipped surrogate with a ratio per token.", false},
    {PolicyLoss::gspo, "gspo",
     "GSPO: one ratio per sequence (the geometric mean of its token ratios), clipped per sequence.", true},
};

// ---- loss aggregation -----------------------------------------------------

enum class LossAggregation { token_mean, seq_mean_token_sum, seq_mean_token_mean, seq_mean_token_sum_norm };

using LossAggregationRow = ChoiceRow<LossAggregation>;

inline constexpr LossAggregationRow kLossAggregations[] = {
    {LossAggregation::token_mean, "token-mean", "Mean over every response token of the batch."},
    {LossAggregation::seq_mean_token_sum, "seq-mean-token-sum",
     "Sum over each sequence's tokens, mean over sequences."},
    {LossAggregation::seq_mean_token_mean, "seq-mean-token-mean",
     "Mean over each sequence's tokens, mean over sequences."},
    {LossAggregation::seq_mean_token_sum_norm, "seq-mean-token-sum-norm",
     "Sum over each sequence's tokens divided by rollout.max_new_tokens (× env.max_turns in multi-turn "
     "episodes), mean over sequences (Dr. GRPO)."},
};

// ---- rollout correction ---------------------------------------------------
// The engines sample with their own numerics (and, off policy, older
// weights) than the policy the update scores a trajectory under before it
// changes (π_old). Per policy token r_t = π_old(t) / π_rollout(t), from the
// training forward's and the engine's log-probs.

enum class RolloutCorrection { none, tis, seq_mask, icepop, decoupled };

struct RolloutCorrectionRow {
  RolloutCorrection id;
  std::string_view name;
  std::string_view doc;
  bool weights;          // each token's policy loss × min(r_t, rollout_is_cap)
  bool masks_tokens;     // tokens whose r_t leaves [rollout_is_low, rollout_is_high] leave the loss
  bool masks_sequences;  // sequences whose geometric-mean ratio leaves the band leave the loss
  bool needs_async;      // only with rollout.max_staleness ≥ 1
};

inline constexpr RolloutCorrectionRow kRolloutCorrections[] = {
    {RolloutCorrection::none, "none", "No correction: the engines' samples count as the policy's own.", false, false,
     false, false},
    {RolloutCorrection::tis, "tis",
     "Truncated importance sampling: each token's policy loss is weighted by min(π_old/π_rollout, rollout_is_cap).",
     true, false, false, false},
    {RolloutCorrection::seq_mask, "seq-mask",
     "A sequence whose geometric-mean ratio exp(mean_t log(π_old/π_rollout)) leaves [rollout_is_low, "
     "rollout_is_high] leaves the policy loss.",
     false, false, true, false},
    {RolloutCorrection::icepop, "icepop",
     "IcePop: a token whose ratio π_old/π_rollout leaves [rollout_is_low, rollout_is_high] leaves the policy loss.",
     false, true, false, false},
    {RolloutCorrection::decoupled, "decoupled",
     "AReaL's decoupled objective for asynchronous rollouts: the PPO clip around the proximal policy (the "
     "trainer's weights before this update, whose log-probs π_old are) and each token weighted by the behaviour "
     "ratio π_old/π_rollout, capped at rollout_is_cap. Needs rollout.max_staleness ≥ 1.",
     true, false, false, true},
};

// ---- KL -------------------------------------------------------------------

enum class KlMode { reward, loss };

using KlModeRow = ChoiceRow<KlMode>;

inline constexpr KlModeRow kKlModes[] = {
    {KlMode::reward, "reward", "A per-token KL penalty (init_kl_coef × estimator) is part of the reward."},
    {KlMode::loss, "loss",
     "A KL term (init_kl_coef × estimator) is added to the actor's loss, aggregated like the policy loss; the "
     "reward carries no KL."},
};

// Schulman's estimators of KL(policy ‖ ref) from samples of the policy.
enum class KlEstimator { k1, k2, k3 };

using KlEstimatorRow = ChoiceRow<KlEstimator>;

inline constexpr KlEstimatorRow kKlEstimators[] = {
    {KlEstimator::k1, "k1", "log(π/π_ref): unbiased, can be negative."},
    {KlEstimator::k2, "k2", "log(π/π_ref)² / 2."},
    {KlEstimator::k3, "k3", "π_ref/π - 1 - log(π_ref/π): unbiased and non-negative."},
};

// ---- lookups --------------------------------------------------------------

// The row of `id` (every id has one: a missing row is a bug, thrown as
// std::logic_error).
template <class Row, std::size_t N>
constexpr const Row& row_of(const Row (&rows)[N], decltype(Row::id) id) {
  for (const Row& row : rows)
    if (row.id == id) return row;
  throw std::logic_error("algorithm table: an enum value without a row");
}

// The row a recipe names, or nullptr.
template <class Row, std::size_t N>
constexpr const Row* row_named(const Row (&rows)[N], std::string_view name) {
  for (const Row& row : rows)
    if (row.name == name) return &row;
  return nullptr;
}

inline const AlgorithmRow& row_of(Algorithm id) { return row_of(kAlgorithms, id); }
inline const AdvantageRow& row_of(AdvantageEstimator id) { return row_of(kAdvantageEstimators, id); }
inline const PolicyLossRow& row_of(PolicyLoss id) { return row_of(kPolicyLosses, id); }
inline const LossAggregationRow& row_of(LossAggregation id) { return row_of(kLossAggregations, id); }
inline const KlModeRow& row_of(KlMode id) { return row_of(kKlModes, id); }
inline const RolloutCorrectionRow& row_of(RolloutCorrection id) { return row_of(kRolloutCorrections, id); }
inline const KlEstimatorRow& row_of(KlEstimator id) { return row_of(kKlEstimators, id); }
inline const DpoLossRow& row_of(DpoLoss id) { return row_of(kDpoLosses, id); }
inline const LossTurnsRow& row_of(LossTurns id) { return row_of(kLossTurns, id); }

template <class Id>
std::string name_of(Id id) {
  return std::string(row_of(id).name);
}

}  // namespace meshrun
