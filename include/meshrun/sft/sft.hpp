// Supervised fine-tuning (`algorithm = "sft"`): the actor role's model
// trained on a JSONL dataset with the parallel training step of
// train_engine.hpp, on every rank of the job.
//
// One optimizer step takes `batch.train` sequences across the data-parallel
// group, `batch.micro_train` per rank per micro-step. The loss is the mean
// token cross-entropy over every target token of the global batch (not a
// mean of per-rank means), so a run's loss curve and weights do not depend
// on how the batch is split over ranks and micro-steps.
//
// Rank 0 appends to <logging.dir>/metrics.jsonl every `logging.steps` steps
// (and at the last): step, epoch, loss, lr, grad_norm, tokens_per_s,
// loss_tokens, skipped and phase times; at the end the actor is written as a
// Hugging Face directory to `checkpoint.output` (with the tokenizer's files
// when the tokenizer came from a directory).
//
// Checkpoints (src/train/training_checkpoint.hpp) go to checkpoint.path
// every save_steps steps and at the end: each rank's engine state and CPU
// random state, the sampler's position, the losses so far. A run starts by
// resuming from the newest complete checkpoint that verifies (load =
// "auto"; "require" insists, "never" starts over); with the same layout the
// resumed run's losses and final weights equal an uninterrupted run's bit
// for bit, and metrics.jsonl is cut back to the checkpoint's step first.
#pragma once

#include <cstdint>
#include <string>

namespace meshrun {

struct Recipe;
struct Plan;
class Runtime;

struct SftSummary {
  std::int64_t steps = 0;
  double first_loss = 0;
  double last_loss = 0;
  std::string output_dir;   // where the final model was written
  std::string metrics_path; // rank 0's metrics.jsonl
};

// Runs the whole SFT job on this rank. `runtime` has its groups built from
// `plan`. Throws (DistError, DataError, ModelLoadError, TokenizerError,
// std::runtime_error) with a message naming what failed.
SftSummary run_sft(const Recipe& recipe, const Plan& plan, Runtime& runtime);

}  // namespace meshrun
