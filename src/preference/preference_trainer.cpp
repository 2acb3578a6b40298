// DPO and reward-model training as one run-shell algorithm
// (meshrun/train/run_shell.hpp): a step is pairs → each micro-batch's pair
// terms (DPO: reference and policy log-probabilities through dpo_loss.hpp;
// RM: the scores at each sequence's last token) → optimizer step →
// metrics; its state is the actor's engine, the random state and the
// sampler's position.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>
#include <spdlog/spdlog.h>

#include "meshrun/data/data.hpp"
#include "meshrun/data/preference.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/metrics/metrics.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/preference/preference.hpp"
#include "meshrun/preference/dpo_loss.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "meshrun/train/storage_sleep.hpp"
#include "meshrun/train/train_engine.hpp"
#include "meshrun/sft/sft_batch.hpp"
#include "meshrun/train/actor_setup.hpp"
#include "meshrun/train/batching.hpp"
#include "meshrun/train/router_balance.hpp"
#include "meshrun/train/run_shell.hpp"
#include "meshrun/train/train_threads.hpp"
#include "meshrun/train/trainer_output.hpp"
#include "meshrun/train/training_checkpoint.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;
using namespace train_detail;

// Summed over the step's pairs (on one rank per dp rank), then over dp.
struct PairSums {
  double loss = 0, accuracy = 0, margin = 0, chosen = 0, rejected = 0;
  double pairs = 0, tokens = 0;
  // A mixture of experts' router figures (RouterBalance): summed, summed, max.
  double aux_sum = 0, aux_micro_batches = 0, load_max = 0;
};

// A micro-batch's pairs [pairs]: the loss, and what the chosen and the
// rejected response are scored (DPO: implicit rewards; RM: scores).
struct PairTerms {
  torch::Tensor loss, chosen, rejected;
};

// The metrics a pair objective reports, by TRL's names (DPO's implicit
// rewards, a reward model's scores); evaluation prefixes "eval_" to the
// accuracy and the margin.
struct PairMetricNames {
  std::string_view accuracy, margin, chosen, rejected;
};

// What DPO and reward models differ in: how a micro-batch's pairs are
// scored. Rows [0, pairs) of the tensors are the chosen responses, [pairs,
// 2 pairs) the rejected ones. The run around it (data, engine, steps,
// evaluation, checkpoints) is one for both.
class PairObjective {
 public:
  virtual ~PairObjective() = default;
  // The head the trained model carries.
  virtual ModelHead head() const = 0;
  // After the actor is built: what the objective needs besides it (DPO's
  // reference); returns the setup line's description.
  virtual std::string prepare(LlamaModel& actor, ModelOptions options) = 0;
  virtual PairTerms terms(const SftTensors& tensors, int64_t pairs, LlamaModel& actor, TrainEngine& engine,
                          PhaseTimers& phases) = 0;
  virtual PairMetricNames metric_names() const = 0;
};

// Summed log-probabilities of each row's response tokens [rows] (the
// shifted labels of SftTensors; -100 elsewhere) under `model` (through
// `engine` when given: the trained actor), the LM head fused with them:
// with sp every rank gathers the whole rows' terms.
torch::Tensor summed_response_log_probs(LlamaModel& model, TrainEngine* engine, const ModelInputs& inputs,
                                        const torch::Tensor& labels) {
  const SequenceShard shard = model->sequence_shard(labels.size(1), labels.device());
  const torch::Tensor local_labels = shard.take(labels, kIgnoreLabel);
  FusedHeadOptions head;
  head.ignore_index = kIgnoreLabel;  // 0 there
  const torch::Tensor local = engine ? engine->forward_log_probs(inputs, local_labels, head).log_probs
                                     : model->forward_log_probs(inputs, local_labels, head).log_probs;
  return model->whole_rows(local, labels.size(1)).to(torch::kFloat32).sum(1);
}

// DPO: reference log-probabilities (no grad), then the policy's, into
// dpo_loss. The reference is the actor's base with its adapters off (LoRA
// on its own model), or a frozen model of its own, which with [colocate]
// sleep waits in host memory between forwards.
class DpoObjective final : public PairObjective {
 public:
  DpoObjective(const RolePlan& role, const DpoConfig& config, long long seed, bool sleep)
      : role_(role), config_(config), seed_(seed), sleep_(sleep) {}

  ModelHead head() const override { return ModelHead::language_model; }

  std::string prepare(LlamaModel&, ModelOptions options) override {
    if (!role_.reference_shares_base) {
      options.gradient_checkpointing = false;
      options.lora = {};  // the reference is the base model itself
      torch::manual_seed(seed_);
      reference_ = load_hf_model(role_.reference_model, options);  // resolved by the plan
      (*reference_)->eval();
      for (auto& parameter : (*reference_)->parameters()) parameter.set_requires_grad(false);
      // Its vocabulary is the actor's: the plan checked the same config.json (plan.reference).
      if (sleep_) reference_sleep_.add((*reference_)->parameters());
    }
    return fmt::format("reference {}, loss {}, beta {}",
                       role_.reference_shares_base ? "the actor's base with its adapters off"
                       : role_.reference_named     ? role_.reference_model
                                                   : "the actor's initial weights",
                       name_of(config_.loss), config_.beta);
  }

  PairTerms terms(const SftTensors& tensors, int64_t pairs, LlamaModel& actor, TrainEngine& engine,
                  PhaseTimers& phases) override {
    const torch::Tensor tokens = tensors.labels.ne(kIgnoreLabel).sum(1);
    torch::Tensor reference;
    {
      auto timer = phases.scope("reference");
      torch::NoGradGuard no_grad;
      if (role_.reference_shares_base) {
        AdaptersOff base_only(actor);
        reference = summed_response_log_probs(actor, nullptr, tensors.inputs, tensors.labels);
      } else {
        if (sleep_) reference_sleep_.wake();
        reference = summed_response_log_probs(*reference_, nullptr, tensors.inputs, tensors.labels);
        if (sleep_) reference_sleep_.sleep();
      }
    }
    auto timer = phases.scope("forward");
    const torch::Tensor policy = summed_response_log_probs(actor, &engine, tensors.inputs, tensors.labels);
    DpoLossTerms terms = dpo_loss(policy.narrow(0, 0, pairs), policy.narrow(0, pairs, pairs),
                                  reference.narrow(0, 0, pairs), reference.narrow(0, pairs, pairs),
                                  tokens.narrow(0, 0, pairs), tokens.narrow(0, pairs, pairs), config_);
    return PairTerms{terms.loss, terms.chosen_rewards, terms.rejected_rewards};
  }

  PairMetricNames metric_names() const override {
    return {"reward_accuracy", "reward_margin", "chosen_reward", "rejected_reward"};
  }

 private:
  const RolePlan& role_;
  const DpoConfig& config_;
  long long seed_;
  bool sleep_;
  std::optional<LlamaModel> reference_;  // unless the reference shares the actor's base
  StorageSleep reference_sleep_;
};

// A reward model: the score at each row's last token (the response's eos,
// where the tokenizer has one; rows are right-padded), and the
// Bradley-Terry loss -log σ(s_chosen − s_rejected).
class RewardModelObjective final : public PairObjective {
 public:
  explicit RewardModelObjective(const RolePlan& role) : role_(role) {}

  ModelHead head() const override { return ModelHead::value; }
  std::string prepare(LlamaModel&, ModelOptions) override { return "a scalar score head on " + role_.model; }

  PairTerms terms(const SftTensors& tensors, int64_t pairs, LlamaModel& actor, TrainEngine& engine,
                  PhaseTimers& phases) override {
    auto timer = phases.scope("forward");
    const int64_t length = tensors.inputs.input_ids.size(1);
    const torch::Tensor scores_by_column = actor->whole_rows(engine.forward(tensors.inputs), length);
    const torch::Tensor last = (tensors.inputs.attention_mask.sum(1) - 1).clamp_min(0).unsqueeze(1);
    const torch::Tensor scores = scores_by_column.gather(1, last).squeeze(1).to(torch::kFloat32);
    const torch::Tensor chosen = scores.narrow(0, 0, pairs), rejected = scores.narrow(0, pairs, pairs);
    return PairTerms{bradley_terry_loss(chosen, rejected), chosen.detach(), rejected.detach()};
  }

  PairMetricNames metric_names() const override { return {"accuracy", "margin", "chosen_score", "rejected_score"}; }

 private:
  const RolePlan& role_;
};

// The objective of a preference algorithm's row.
std::unique_ptr<PairObjective> pair_objective(Algorithm algorithm, const RolePlan& role, const DpoConfig& dpo,
                                              long long seed, bool sleep) {
  switch (algorithm) {
    case Algorithm::dpo: return std::make_unique<DpoObjective>(role, dpo, seed, sleep);
    case Algorithm::rm: return std::make_unique<RewardModelObjective>(role);
    case Algorithm::sft:
    case Algorithm::ppo: break;
  }
  throw std::logic_error("no pair objective for " + name_of(algorithm));
}

class PreferenceRun final : public RunAlgorithm {
 public:
  PreferenceRun(const Plan& plan, Runtime& runtime)
      : algorithm_(plan.algorithm),
        plan_(plan),
        actor_(ActorSlot::of(plan, runtime)),
        role_(actor_.role),
        mesh_(actor_.mesh),
        device_(device_for(plan)),
        dtype_(torch_dtype_of(role_.dtype)),
        world_(runtime.world()),
        dp_(actor_.dp),
        tp_(actor_.tp),
        sp_(actor_.sp) {}

  std::string_view headline() const override { return "loss"; }

  int64_t setup() override {
    DataTokenizer loaded = load_data_tokenizer(plan_.data, role_.model);
    tokenizer_source_ = loaded.source;
    std::unique_ptr<Tokenizer> tokenizer = std::move(loaded.tokenizer);
    SftDataOptions data_options;
    data_options.dp_rank = dp_->rank();
    data_options.dp_size = dp_->size();
    data_ = std::make_unique<PreferenceData>(plan_.data, batching_of(plan_), *tokenizer, data_options);
    if (plan_.run.evaluates)
      eval_ = preference_eval_batches(plan_.data, plan_.step.micro_batch, *tokenizer, data_options);

    objective_ = pair_objective(algorithm_, role_, plan_.dpo, plan_.run.seed, plan_.sleep);
    ModelOptions options = model_options_for(role_, mesh_, device_);
    options.head = objective_->head();
    // One seed before each load: a built-in preset's random weights are
    // then the same for the actor and a reference that names it.
    torch::manual_seed(plan_.run.seed);
    model_ = load_hf_model(role_.model, options);
    check_vocabulary(*model_, *tokenizer, role_.model);
    const std::string about = objective_->prepare(*model_, options);

    const int64_t total_steps = planned_steps(data_->total_steps(), plan_.run);
    engine_ = std::make_unique<TrainEngine>(*model_, mesh_, EngineOptions::from_plan(role_, total_steps));
    engine_->train();
    if (dist::rank() == 0)
      spdlog::info("{}: {}; {} steps of {} pairs ({} micro-steps of {} per rank, dp {}, sp {}, tp {}); {}",
                   name_of(algorithm_), data_->dataset().summary(), total_steps, plan_.step.train_batch,
                   data_->grad_accum(), plan_.step.micro_batch, dp_->size(), mesh_.sp(), mesh_.tp(), about);
    return total_steps;
  }

  std::string layout() const override { return actor_layout(actor(), world_.size()); }

  void restore(const ResumePoint& point) override { data_->restore(restore_actor(actor(), point)); }

  std::optional<StepOutcome> step(int64_t step, int64_t) override {
    std::optional<SftStep> batches;
    {
      auto timer = phases_.scope("data");
      batches = data_->next();
    }
    if (!batches) return std::nullopt;
    const PairSums sums = train_step(*batches);
    StepResult result;
    {
      auto timer = phases_.scope("optimizer");
      result = engine_->step();
      result.read();  // its metrics are read every step (a sync, as its sums are)
    }
    throughput_.record(static_cast<long long>(sums.tokens));
    const double pairs = std::max(1.0, sums.pairs);
    const double loss = sums.loss / pairs, accuracy = sums.accuracy / pairs, margin = sums.margin / pairs;
    StepOutcome out;
    out.headline = loss;
    out.record = MetricsRecord(step);
    out.record.set("epoch", batches->epoch).set("loss", loss);
    const PairMetricNames names = objective_->metric_names();
    out.record.set(names.accuracy, accuracy)
        .set(names.margin, margin)
        .set(names.chosen, sums.chosen / pairs)
        .set(names.rejected, sums.rejected / pairs);
    out.record.set("lr", result.lr)
        .set("grad_norm", result.grad_norm)
        .set("tokens_per_s", throughput_.tokens_per_second().value_or(0.0))
        .set("tokens", sums.tokens)
        .set("skipped", result.skipped);
    if (dtype_ == torch::kFloat16) out.record.set("loss_scale", result.loss_scale);
    if ((*model_)->config().mixture_of_experts())
      RouterBalance::set_metrics(out.record, sums.aux_sum, sums.aux_micro_batches, sums.load_max);
    phases_.add_to(out.record);
    phases_.reset();
    out.console = fmt::format("loss {:.4f} accuracy {:.3f} margin {:.4f} lr {:.3g} grad_norm {:.3f}{}", loss,
                              accuracy, margin, result.lr, result.grad_norm,
                              result.skipped ? " (skipped: non-finite gradients)" : "");
    return out;
  }

  // The evaluation pairs scored like the training ones, without gradients:
  // eval_loss and the accuracy and margin of the pair terms.
  void evaluate(MetricsRecord& record) override {
    const auto started = std::chrono::steady_clock::now();
    engine_->eval();
    PairSums sums;
    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < eval_->batches.size(); ++i) {
        const SftTensors tensors = to_tensors(eval_->batches[i], device_, (*model_)->config().vocab);
        const PairTerms terms = pair_terms(tensors, tensors.labels.size(0) / 2);
        if (eval_->counted[i]) add(sums, terms, eval_->batches[i]);
      }
    }
    engine_->train();
    phases_.reset();  // the terms' phase times belong to no step
    sums = reduced(sums);
    const double pairs = std::max(1.0, sums.pairs);
    record.set("eval_loss", sums.loss / pairs);
    const PairMetricNames names = objective_->metric_names();
    record.set("eval_" + std::string(names.accuracy), sums.accuracy / pairs)
        .set("eval_" + std::string(names.margin), sums.margin / pairs);
    record.set("time/eval", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }

  CheckpointContent checkpoint(int64_t) override {
    return actor_checkpoint(actor(), data_->state(), plan_.run.save_hf);
  }

  void write_output(const std::string& directory) override {
    write_actor_output(actor(), directory, name_of(algorithm_));
  }

 private:
  ActorRun actor() const { return ActorRun{*engine_, *model_, mesh_, role_.dtype, device_, role_.model, tokenizer_source_}; }

  // Every micro-batch's pair terms, forward and backward. Each micro-step's
  // loss is its pairs' sum over the global batch's pair count, times dp
  // (the engine averages gradients over dp × sp, and with sp every rank of
  // the group computes the whole loss: gather_columns sums their
  // gradients, the average takes the sp back out).
  PairSums train_step(const SftStep& step) {
    PairSums sums;
    const double scale = static_cast<double>(dp_->size()) / static_cast<double>(plan_.step.train_batch);
    // The policy's forward comes last in pair_terms, so router_stats() is its.
    RouterBalance balance{role_.router_aux_loss_coef};
    const double share = 1.0 / static_cast<double>(std::max<std::size_t>(1, step.micro_batches.size()));
    for (std::size_t i = 0; i < step.micro_batches.size(); ++i) {
      const SftTensors tensors = to_tensors(step.micro_batches[i], device_, (*model_)->config().vocab);
      const PairTerms terms = pair_terms(tensors, tensors.labels.size(0) / 2);
      {
        auto timer = phases_.scope("backward");
        engine_->backward(balance.add(terms.loss.sum() * scale, (*model_)->router_stats(), share),
                          i + 1 == step.micro_batches.size());
      }
      add(sums, terms, step.micro_batches[i]);
    }
    sums.aux_sum = balance.aux_sum;
    sums.aux_micro_batches = balance.micro_batches;
    sums.load_max = balance.load_max;
    return reduced(sums);
  }

  PairTerms pair_terms(const SftTensors& tensors, int64_t pairs) {
    return objective_->terms(tensors, pairs, *model_, *engine_, phases_);
  }

  // Adds a micro-batch's terms on one rank per dp rank (tp and sp ranks
  // hold the same terms).
  void add(PairSums& sums, const PairTerms& terms, const MicroBatch& batch) const {
    if (mesh_.coordinate(MeshAxis::tp) != 0 || mesh_.coordinate(MeshAxis::sp) != 0) return;
    sums.loss += terms.loss.detach().sum().item<double>();
    sums.accuracy += terms.chosen.gt(terms.rejected).sum().item<double>();
    sums.margin += (terms.chosen - terms.rejected).sum().item<double>();
    sums.chosen += terms.chosen.sum().item<double>();
    sums.rejected += terms.rejected.sum().item<double>();
    sums.pairs += static_cast<double>(terms.loss.size(0));
    sums.tokens += static_cast<double>(batch.tokens);
  }

  // Collective: the sums over the job. Every rank holds the actor (it is
  // the only placed role); one per dp rank contributed.
  PairSums reduced(const PairSums& sums) {
    torch::Tensor totals = torch::tensor({sums.loss, sums.accuracy, sums.margin, sums.chosen, sums.rejected, sums.pairs,
                                          sums.tokens, sums.aux_sum, sums.aux_micro_batches},
                                         torch::kFloat64)
                               .to(world_.device());
    world_.all_reduce(totals);
    totals = totals.cpu();
    const auto* t = totals.data_ptr<double>();
    PairSums out{t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], 0};
    if ((*model_)->config().mixture_of_experts())
      out.load_max = dist::all_reduce_value(sums.load_max, ReduceOp::max, &world_);
    return out;
  }

  const Algorithm algorithm_;
  const Plan& plan_;
  ActorSlot actor_;
  const RolePlan& role_;
  DeviceMesh& mesh_;
  torch::Device device_;
  torch::Dtype dtype_;
  Group& world_;
  Group* dp_;
  Group* tp_;
  Group* sp_;
  std::string tokenizer_source_;
  std::unique_ptr<PreferenceData> data_;
  std::optional<EvalBatches> eval_;  // [data] eval_path
  std::optional<LlamaModel> model_;
  std::unique_ptr<PairObjective> objective_;
  std::unique_ptr<TrainEngine> engine_;
  ThroughputMeter throughput_{steady_clock()};
  PhaseTimers phases_{steady_clock()};
};

}  // namespace

RunSummary run_dpo(const Plan& plan, Runtime& runtime) {
  train_detail::set_training_threads(runtime.launch(), train_detail::device_for(plan).is_cpu());
  PreferenceRun dpo(plan, runtime);
  return train_detail::run_shell(dpo, plan.run, runtime.world());
}

RunSummary run_rm(const Plan& plan, Runtime& runtime) {
  train_detail::set_training_threads(runtime.launch(), train_detail::device_for(plan).is_cpu());
  PreferenceRun rm(plan, runtime);
  return train_detail::run_shell(rm, plan.run, runtime.world());
}

}  // namespace meshrun
