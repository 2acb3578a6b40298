// The SFT loop: data → micro-steps through the TrainEngine → optimizer step
// → metrics; the final model to a Hugging Face directory.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <optional>
#include <spdlog/spdlog.h>

#include "meshrun/data.hpp"
#include "meshrun/dist.hpp"
#include "meshrun/hf_model.hpp"
#include "meshrun/mesh.hpp"
#include "meshrun/metrics.hpp"
#include "meshrun/plan.hpp"
#include "meshrun/recipe.hpp"
#include "meshrun/sft/sft.hpp"
#include "meshrun/tokenizer.hpp"
#include "meshrun/train_engine.hpp"
#include "sft_batch.hpp"
#include "src/train/train_threads.hpp"
#include "src/train/trainer_output.hpp"
#include "src/train/training_checkpoint.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;
using train_detail::SftTensors;
using namespace train_detail;

struct StepLoss {
  double loss = 0;          // mean over the global batch's target tokens
  long long loss_tokens = 0;  // across the dp group
  long long tokens = 0;       // across the dp group
};

class SftRun {
 public:
  SftRun(const Recipe& recipe, Runtime& runtime)
      : recipe_(recipe),
        actor_(*recipe.role("actor")),
        mesh_(runtime.mesh("actor")),
        device_(device_for(recipe)),
        dtype_(dtype_from_recipe_name(actor_.dtype)),
        world_(runtime.world()) {
    if (!mesh_.holds_this_rank())
      throw std::runtime_error("rank " + std::to_string(runtime.launch().rank) +
                               " holds no part of the actor, the only role of an SFT run");
    // Lint refuses this (mesh.sp-unsupported); a plan made elsewhere still may not.
    if (mesh_.sp() > 1)
      throw ConfigError("sp = " + std::to_string(mesh_.sp()) +
                            ", but algorithm \"sft\" does not support sequence parallelism yet",
                        "mesh.sp", "mesh.sp-unsupported");
    dp_ = &mesh_.group(MeshAxis::dp);
    tp_ = mesh_.tp() > 1 ? &mesh_.group(MeshAxis::tp) : nullptr;
  }

  SftSummary run() {
    const std::string tokenizer_source = recipe_.data.tokenizer.empty() ? actor_.model : recipe_.data.tokenizer;
    auto tokenizer = load_tokenizer(tokenizer_source);
    SftDataOptions data_options;
    data_options.dp_rank = dp_->rank();
    data_options.dp_size = dp_->size();
    SftData data(recipe_, *tokenizer, data_options);

    ModelOptions model_options;
    model_options.tensor_parallel = tp_;
    model_options.dtype = dtype_;
    model_options.device = device_;
    model_options.gradient_checkpointing = actor_.gradient_checkpointing;
    LlamaModel model = load_hf_model(actor_.model, model_options);
    if (model->options().config.vocab < tokenizer->vocab_size())
      throw std::runtime_error("the tokenizer (" + tokenizer->description() + ") has " +
                               std::to_string(tokenizer->vocab_size()) + " tokens but the model " + actor_.model +
                               " only " + std::to_string(model->options().config.vocab));

    std::int64_t total_steps = data.total_steps();
    if (recipe_.train.max_steps > 0) total_steps = std::min<std::int64_t>(total_steps, recipe_.train.max_steps);
    if (total_steps <= 0)
      throw std::runtime_error("the dataset " + recipe_.data.path + " gives no complete global batch of " +
                               std::to_string(recipe_.batch.train) + " sequences");
    TrainEngine engine(model, mesh_, EngineOptions::from_recipe(actor_, recipe_.train, total_steps));
    engine.train();
    if (dist::rank() == 0)
      spdlog::info("sft: {} sequences, {} steps of {} sequences ({} micro-steps of {} per rank, dp {}, tp {})",
                   data.sequences().size(), total_steps, recipe_.batch.train, data.grad_accum(),
                   recipe_.batch.micro_train, dp_->size(), mesh_.tp());

    SftSummary summary;
    TrainingCheckpointer checkpointer(recipe_, world_, layout(engine));
    std::int64_t first_step = 1;
    std::optional<ResumePoint> resumed = checkpointer.resume();
    if (resumed) {
      resumed->restore_engine("actor", engine);
      resumed->restore_rng_states(device_);
      data.restore(SamplerState::from_json(resumed->trainer.at("sampler").dump()));
      first_step = resumed->step + 1;
      summary.first_loss = resumed->trainer.value("first_loss", 0.0);
      summary.last_loss = resumed->trainer.value("last_loss", 0.0);
      summary.steps = resumed->step;
    }
    const std::string metrics_path = (fs::path(recipe_.logging.dir) / "metrics.jsonl").string();
    if (world_.rank() == 0) MetricsWriter::keep_steps_up_to(metrics_path, resumed ? resumed->step : 0);
    metrics_ = std::make_unique<MetricsWriter>(recipe_.logging.dir, world_.rank() == 0);

    ThroughputMeter throughput(steady_clock());
    PhaseTimers phases(steady_clock());
    for (std::int64_t step = first_step; step <= total_steps; ++step) {
      std::optional<SftStep> batches;
      {
        auto timer = phases.scope("data");
        batches = data.next();
      }
      if (!batches) break;
      data_state_json_ = data.state().to_json();
      StepLoss loss = train_step(engine, *batches, phases);
      StepResult result;
      {
        auto timer = phases.scope("optimizer");
        result = engine.step();
      }
      throughput.record(loss.tokens);
      if (step == 1) summary.first_loss = loss.loss;
      summary.last_loss = loss.loss;
      summary.steps = step;
      if (step % recipe_.logging.steps == 0 || step == total_steps)
        log_step(step, batches->epoch, loss, result, throughput, phases);
      // After the metrics line: a checkpoint of step k implies its metrics.
      if (checkpointer.due(step, step == total_steps)) save_checkpoint(checkpointer, engine, model, step, summary);
      checkpointer.poll();
      phases.reset();
    }
    checkpointer.finish();

    summary.output_dir = recipe_.checkpoint.output;
    save_output(engine, model, tokenizer_source);
    summary.metrics_path = metrics_->path();
    return summary;
  }

 private:
  // Forward and backward of every micro-batch of one step. Each micro-step's
  // loss is its token-loss sum over the global batch's target-token count
  // (times dp, since the engine averages gradients over dp), so the summed
  // gradient is that of the global token mean.
  StepLoss train_step(TrainEngine& engine, const SftStep& step, PhaseTimers& phases) {
    long long local_loss_tokens = 0, local_tokens = 0;
    for (const auto& micro : step.micro_batches) {
      local_loss_tokens += micro.loss_tokens;
      local_tokens += micro.tokens;
    }
    StepLoss out;
    out.loss_tokens = dist::all_reduce_value(static_cast<std::int64_t>(local_loss_tokens), ReduceOp::sum, dp_);
    out.tokens = dist::all_reduce_value(static_cast<std::int64_t>(local_tokens), ReduceOp::sum, dp_);
    const double scale = static_cast<double>(dp_->size()) / static_cast<double>(std::max(1LL, out.loss_tokens));
    // Summed as a tensor and read once per step: reading it per micro-step
    // would wait for the device every time.
    torch::Tensor local_loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kFloat64).device(device_));
    for (std::size_t i = 0; i < step.micro_batches.size(); ++i) {
      SftTensors tensors = train_detail::to_tensors(step.micro_batches[i], device_);
      torch::Tensor token_loss;
      {
        auto timer = phases.scope("forward");
        torch::Tensor logits = engine.forward(tensors.inputs);
        token_loss = vocab_parallel_cross_entropy(logits, tensors.labels, tp_, train_detail::kIgnoreLabel);
      }
      torch::Tensor loss_sum = token_loss.to(torch::kFloat32).sum();
      local_loss_sum += loss_sum.detach();
      auto timer = phases.scope("backward");
      engine.backward(loss_sum * scale, i + 1 == step.micro_batches.size());
    }
    out.loss = dist::all_reduce_value(local_loss_sum.item<double>(), ReduceOp::sum, dp_) /
               std::max(1LL, out.loss_tokens);
    return out;
  }

  void log_step(std::int64_t step, std::int64_t epoch, const StepLoss& loss, const StepResult& result,
                const ThroughputMeter& throughput, const PhaseTimers& phases) {
    MetricsRecord record(step);
    record.set("epoch", epoch)
        .set("loss", loss.loss)
        .set("lr", result.lr)
        .set("grad_norm", result.grad_norm)
        .set("tokens_per_s", throughput.tokens_per_second().value_or(0.0))
        .set("loss_tokens", loss.loss_tokens)
        .set("tokens", loss.tokens)
        .set("skipped", result.skipped);
    if (dtype_ == torch::kFloat16) record.set("loss_scale", result.loss_scale);
    phases.add_to(record);
    metrics_->write(record);
    if (dist::rank() == 0)
      spdlog::info("step {} loss {:.4f} lr {:.3g} grad_norm {:.3f} tokens/s {:.0f}{}", step, loss.loss, result.lr,
                   result.grad_norm, throughput.tokens_per_second().value_or(0.0),
                   result.skipped ? " (skipped: non-finite gradients)" : "");
  }

  // "world 2; actor dp 2 tp 1 zero 1": what the rank files of a checkpoint
  // depend on.
  std::string layout(const TrainEngine& engine) const {
    return "world " + std::to_string(world_.size()) + "; actor dp " + std::to_string(dp_->size()) + " tp " +
           std::to_string(mesh_.tp()) + " zero " + std::to_string(engine.options().zero_stage) + " " + actor_.dtype;
  }

  void save_checkpoint(TrainingCheckpointer& checkpointer, TrainEngine& engine, LlamaModel& model, std::int64_t step,
                       const SftSummary& summary) {
    RankState state;
    state.add_engine("actor", engine, model->options().config, model->options().head, actor_.dtype);
    state.add_rng_states(device_);
    nlohmann::json trainer = {{"step", step},
                              {"sampler", nlohmann::json::parse(data_state_json_)},
                              {"first_loss", summary.first_loss},
                              {"last_loss", summary.last_loss}};
    NamedTensors full;
    if (recipe_.checkpoint.save_hf) full = engine.gather_full_parameters();  // collective
    // By value: with [checkpoint] async this runs in the background.
    const bool write_hf = recipe_.checkpoint.save_hf && world_.rank() == 0;
    checkpointer.save(step, state, trainer,
                      [write_hf, dtype = dtype_, config = model->options().config, head = model->options().head,
                       full = std::move(full)](const std::string& directory) {
                        if (!write_hf) return;
                        SaveModelOptions options;
                        options.dtype = dtype;
                        save_hf_model((fs::path(directory) / "hf" / "actor").string(), config, head, full, options);
                      });
  }

  void save_output(TrainEngine& engine, LlamaModel& model, const std::string& tokenizer_source) {
    NamedTensors full = engine.gather_full_parameters();  // collective: every rank
    if (dist::rank() == 0) {
      SaveModelOptions options;
      options.dtype = dtype_;
      save_hf_model(recipe_.checkpoint.output, model->options().config, model->options().head, full, options);
      copy_tokenizer_files(tokenizer_source, recipe_.checkpoint.output);
      spdlog::info("sft: model written to {}", recipe_.checkpoint.output);
    }
    dist::barrier();
  }

  const Recipe& recipe_;
  const RoleConfig& actor_;
  DeviceMesh& mesh_;
  torch::Device device_;
  torch::Dtype dtype_;  // the actor's parameter dtype
  Group& world_;
  std::unique_ptr<MetricsWriter> metrics_;
  std::string data_state_json_;  // the sampler's state after the current step
  Group* dp_ = nullptr;
  Group* tp_ = nullptr;
};

}  // namespace

SftSummary run_sft(const Recipe& recipe, const Plan& plan, Runtime& runtime) {
  (void)plan;  // the runtime's groups were built from it
  train_detail::set_training_threads(runtime.launch());
  return SftRun(recipe, runtime).run();
}

}  // namespace meshrun
