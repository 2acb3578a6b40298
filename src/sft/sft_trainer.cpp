// SFT as a run-shell algorithm (meshrun/train/run_shell.hpp): a step is data →
// micro-steps through the TrainEngine → optimizer step → metrics; its state
// is the engine, the random state and the sampler's position.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <spdlog/spdlog.h>

#include "meshrun/data/data.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/metrics/metrics.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/sft/sft.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
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
using train_detail::SftTensors;
using namespace train_detail;

// One step's loss as the device holds it: read back (a sync) only when the
// run shell asks for the step's figures.
struct StepLoss {
  torch::Tensor loss_sum;  // float64 []: the target tokens' loss summed over the replicas
  torch::Tensor counts;    // float64 [2]: {target tokens, tokens} summed over the dp group
  // Mixtures of experts: the routers' figures over the replicas
  // (RouterBalance, read per micro-batch).
  bool moe = false;
  double aux_sum = 0, aux_micro_batches = 0, load_max = 0;
};

class SftRun final : public RunAlgorithm {
 public:
  SftRun(const Plan& plan, Runtime& runtime)
      : plan_(plan),
        actor_(ActorSlot::of(plan, runtime)),
        role_(actor_.role),
        mesh_(actor_.mesh),
        device_(device_for(plan)),
        dtype_(torch_dtype_of(role_.dtype)),
        world_(runtime.world()),
        dp_(actor_.dp),
        replicas_(&mesh_.replica_group()),
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
    data_ = std::make_unique<SftData>(plan_.data, batching_of(plan_), *tokenizer, data_options);
    if (plan_.run.evaluates) eval_ = sft_eval_batches(plan_.data, plan_.step.micro_batch, *tokenizer, data_options);

    model_ = load_hf_model(role_.model, model_options_for(role_, mesh_, device_));
    check_vocabulary(*model_, *tokenizer, role_.model);
    const int64_t total_steps = planned_steps(data_->total_steps(), plan_.run);
    engine_ = std::make_unique<TrainEngine>(*model_, mesh_, EngineOptions::from_plan(role_, total_steps));
    engine_->train();
    if (dist::rank() == 0)
      spdlog::info("sft: {}; {} sequences, {} steps of {} sequences ({} micro-steps of {} per rank, dp {}, sp {}, "
                   "tp {})",
                   data_->dataset().stats.summary(), data_->sequences().size(), total_steps, plan_.step.train_batch,
                   data_->grad_accum(), role_.micro_batch, dp_->size(), mesh_.sp(), mesh_.tp());
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
    StepLoss loss = train_step(*batches);
    StepResult result;
    {
      auto timer = phases_.scope("optimizer");
      result = engine_->step();
    }
    // Tokens since the last read, summed on the device: throughput counts
    // every step's, read with the figures of the step that is read.
    unread_tokens_ = unread_tokens_.defined() ? unread_tokens_ + loss.counts[1] : loss.counts[1].clone();
    StepOutcome out;
    out.record = MetricsRecord(step);
    // Host clocks: each step's own phases, whenever its figures are read.
    phases_.add_to(out.record);
    phases_.reset();
    const int64_t epoch = batches->epoch;
    out.finish = [this, loss, result, epoch](StepOutcome& outcome) mutable {
      // One copy to the host of every device figure.
      const torch::Tensor figures = torch::cat({loss.loss_sum.reshape({1}), loss.counts.reshape({2}),
                                                unread_tokens_.reshape({1})})
                                        .to(torch::kCPU, torch::kFloat64);
      unread_tokens_ = torch::Tensor();
      result.read();
      const double* v = figures.const_data_ptr<double>();
      const auto loss_tokens = static_cast<long long>(v[1]), tokens = static_cast<long long>(v[2]);
      const double mean_loss = v[0] / static_cast<double>(std::max(1LL, loss_tokens));
      throughput_.record(static_cast<int64_t>(v[3]));
      outcome.headline = mean_loss;
      outcome.record.set("epoch", epoch)
          .set("loss", mean_loss)
          .set("lr", result.lr)
          .set("grad_norm", result.grad_norm)
          .set("tokens_per_s", throughput_.tokens_per_second().value_or(0.0))
          .set("loss_tokens", loss_tokens)
          .set("tokens", tokens)
          .set("skipped", result.skipped);
      if (dtype_ == torch::kFloat16) outcome.record.set("loss_scale", result.loss_scale);
      if (loss.moe) RouterBalance::set_metrics(outcome.record, loss.aux_sum, loss.aux_micro_batches, loss.load_max);
      outcome.console = fmt::format("loss {:.4f} lr {:.3g} grad_norm {:.3f} tokens/s {:.0f}{}", mean_loss, result.lr,
                                    result.grad_norm, throughput_.tokens_per_second().value_or(0.0),
                                    result.skipped ? " (skipped: non-finite gradients)" : "");
    };
    // Where the step decided on the host its figures cost nothing to read:
    // every step's row is whole, as before.
    if (!result.pending()) {
      auto finish = std::move(out.finish);
      out.finish = nullptr;
      finish(out);
    }
    return out;
  }

  // eval_loss: the mean token cross-entropy over every target token of the
  // evaluation set, each dp rank scoring its share.
  void evaluate(MetricsRecord& record) override {
    const auto started = std::chrono::steady_clock::now();
    engine_->eval();
    double loss_sum = 0;
    long long loss_tokens = 0;
    {
      torch::NoGradGuard no_grad;
      for (std::size_t i = 0; i < eval_->batches.size(); ++i) {
        const SftTensors tensors = train_detail::to_tensors(eval_->batches[i], device_, (*model_)->config().vocab);
        const SequenceShard shard = (*model_)->sequence_shard(tensors.labels.size(1), device_);
        const torch::Tensor batch_loss = summed_loss(tensors.inputs, shard.take(tensors.labels, train_detail::kIgnoreLabel));
        if (!eval_->counted[i]) continue;
        loss_sum += batch_loss.item<double>();
        loss_tokens += eval_->batches[i].loss_tokens;
      }
    }
    engine_->train();
    const double total = dist::all_reduce_value(loss_sum, ReduceOp::sum, replicas_);
    const auto tokens = dist::all_reduce_value(static_cast<std::int64_t>(loss_tokens), ReduceOp::sum, dp_);
    record.set("eval_loss", total / static_cast<double>(std::max<std::int64_t>(1, tokens)))
        .set("time/eval", std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }

  CheckpointContent checkpoint(int64_t) override {
    return actor_checkpoint(actor(), data_->state(), plan_.run.save_hf);
  }

  void write_output(const std::string& directory) override {
    write_actor_output(actor(), directory, "sft");
  }

 private:
  // The cross-entropy summed over this rank's target tokens (its local
  // columns' labels), the LM head fused with it so the logits are never
  // whole.
  torch::Tensor summed_loss(const ModelInputs& inputs, const torch::Tensor& labels) {
    FusedHeadOptions head;
    head.ignore_index = train_detail::kIgnoreLabel;
    head.labels_checked = inputs.ids_checked;  // to_tensors checked the ids its labels come from
    return engine_->forward_loss_sum(inputs, labels, head);
  }

  ActorRun actor() const { return ActorRun{*engine_, *model_, mesh_, role_.dtype, device_, role_.model, tokenizer_source_}; }

  // Forward and backward of every micro-batch of one step. Each micro-step's
  // loss is its token-loss sum over the global batch's target-token count
  // (times dp × sp, since the engine averages gradients over the replicas),
  // so the summed gradient is that of the global token mean. The sp ranks
  // of a dp rank share its micro-batches; each computes the loss of its
  // columns.
  StepLoss train_step(const SftStep& step) {
    long long local_loss_tokens = 0, local_tokens = 0;
    for (const auto& micro : step.micro_batches) {
      local_loss_tokens += micro.loss_tokens;
      local_tokens += micro.tokens;
    }
    const auto on_device = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
    StepLoss out;
    // Filled on the device (fill_ takes the value as a kernel argument: no
    // copy from the host to wait for), summed over dp there.
    out.counts = torch::empty({2}, on_device);
    out.counts[0].fill_(static_cast<double>(local_loss_tokens));
    out.counts[1].fill_(static_cast<double>(local_tokens));
    if (dp_ != nullptr && dp_->size() > 1) dp_->all_reduce(out.counts);
    // The loss of a micro-step: its token-loss sum × replicas / the global
    // batch's target tokens (at least 1), in the loss's float32.
    const torch::Tensor scale =
        (static_cast<double>(replicas_->size()) / out.counts[0].clamp_min(1.0)).to(torch::kFloat32);
    // Summed as a tensor and read when the shell asks: reading it per
    // micro-step would wait for the device every time.
    torch::Tensor local_loss_sum = torch::zeros({}, on_device);
    RouterBalance balance{role_.router_aux_loss_coef};
    const double share = 1.0 / static_cast<double>(std::max<std::size_t>(1, step.micro_batches.size()));
    const int64_t vocab = (*model_)->config().vocab;
    for (std::size_t i = 0; i < step.micro_batches.size(); ++i) {
      SftTensors tensors = train_detail::to_tensors(step.micro_batches[i], device_, vocab);
      torch::Tensor loss_sum;
      {
        auto timer = phases_.scope("forward");
        const SequenceShard shard = (*model_)->sequence_shard(tensors.labels.size(1), device_);
        loss_sum = summed_loss(tensors.inputs, shard.take(tensors.labels, train_detail::kIgnoreLabel));
      }
      local_loss_sum += loss_sum.detach();
      const torch::Tensor loss = balance.add(loss_sum * scale, (*model_)->router_stats(), share);
      auto timer = phases_.scope("backward");
      engine_->backward(loss, i + 1 == step.micro_batches.size());
    }
    if (replicas_->size() > 1) replicas_->all_reduce(local_loss_sum);
    out.loss_sum = local_loss_sum;
    // Every rank of a mixture runs this (its config says so), whatever its micro-batches.
    if ((*model_)->config().mixture_of_experts()) {
      out.moe = true;
      out.aux_sum = dist::all_reduce_value(balance.aux_sum, ReduceOp::sum, replicas_);
      out.aux_micro_batches = dist::all_reduce_value(balance.micro_batches, ReduceOp::sum, replicas_);
      out.load_max = dist::all_reduce_value(balance.load_max, ReduceOp::max, replicas_);
    }
    return out;
  }

  const Plan& plan_;
  ActorSlot actor_;
  const RolePlan& role_;
  DeviceMesh& mesh_;
  torch::Device device_;
  torch::Dtype dtype_;  // the actor's parameter dtype
  Group& world_;
  Group* dp_;
  Group* replicas_;  // dp × sp: what gradients are averaged over
  Group* tp_;
  Group* sp_;
  std::string tokenizer_source_;
  std::unique_ptr<SftData> data_;
  std::optional<EvalBatches> eval_;  // [data] eval_path
  std::optional<LlamaModel> model_;
  std::unique_ptr<TrainEngine> engine_;
  ThroughputMeter throughput_{steady_clock()};
  PhaseTimers phases_{steady_clock()};
  torch::Tensor unread_tokens_;  // float64 []: tokens of the steps whose figures were not read yet
};

}  // namespace

RunSummary run_sft(const Plan& plan, Runtime& runtime) {
  train_detail::set_training_threads(runtime.launch(), train_detail::device_for(plan).is_cpu());
  SftRun sft(plan, runtime);
  return train_detail::run_shell(sft, plan.run, runtime.world());
}

}  // namespace meshrun
