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
// The run shell (meshrun/train/run_shell.hpp) gives it resume, checkpoint
// cadence, metrics rows and the final export, as for every algorithm. Rank
// 0's metrics.jsonl rows hold step, epoch, loss, lr, grad_norm,
// tokens_per_s, loss_tokens, tokens, skipped and phase times; at the end the
// actor is written as a Hugging Face directory to `checkpoint.output` (with
// the tokenizer's files when the tokenizer came from a directory).
// A checkpoint holds each rank's engine state and random state and the
// sampler's position; with the same layout a resumed run's losses and final
// weights equal an uninterrupted run's bit for bit.
#pragma once

#include "meshrun/train/run.hpp"

namespace meshrun {

struct Plan;
class Runtime;

// Runs the whole SFT job on this rank, from the resolved plan only.
// `runtime` has its groups built from `plan`. Throws meshrun::Error kinds
// (DistError, DataError, ModelLoadError, TokenizerError, ConfigError at its
// recipe key) with a message naming what failed.
RunSummary run_sft(const Plan& plan, Runtime& runtime);

}  // namespace meshrun
