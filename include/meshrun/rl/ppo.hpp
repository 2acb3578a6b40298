// PPO and its REINFORCE-family variants (`algorithm = "ppo"`): every rank
// takes its roles from the plan and runs the loop
//   prompts → rollout engines → on_rollout hook → scoring (actor and ref
//   log-probs, critic values, reward model, reward hook) → experience (KL
//   penalty, advantages) → actor and critic updates → weights to the engines
//   → metrics and the on_step hook.
//
// Data between roles moves by collectives over the world group, never
// through files: each phase's producers (an engine's first rank, a role's
// first tp rank of every dp slice) fill their rows of a fixed-shape tensor
// and one all-reduce gives every rank the whole batch, so roles on disjoint
// ranks work concurrently and colocated roles simply take turns. Every rank
// then computes the same experience from the same numbers. Hooks run on
// rank 0 only; their outcome (or their error, which then ends the job on
// every rank) is broadcast.
//
// One step uses batch.rollout prompts × n_samples_per_prompt samples; each
// of the max_epochs passes over them takes optimizer steps of batch.train
// samples (batch.micro_train per rank per micro-step). Losses are token
// means over each optimizer step's global batch, as in SFT. The run shell
// (meshrun/train/run_shell.hpp) gives it resume, checkpoint cadence, metrics
// rows and the final export as for every algorithm: rank 0 writes
// metrics.jsonl; at the end the actor is written as a Hugging Face
// directory to checkpoint.output.
#pragma once

#include "meshrun/train/run.hpp"

namespace meshrun {

struct Plan;
class Runtime;

// Reads only the resolved plan. Throws meshrun::Error kinds (DistError,
// DataError, HookError, ModelLoadError, ConfigError at its recipe key) with a
// message naming what failed.
RunSummary run_ppo(const Plan& plan, Runtime& runtime);

}  // namespace meshrun
