// Training on preference pairs (data/preference.hpp): DPO (algorithm =
// "dpo") and Bradley-Terry reward models (algorithm = "rm"), one trainer
// whose step differs only in what a pair's two sequences are scored by.
//
// A step takes batch.train pairs; every micro-batch holds whole pairs, so a
// pair's two sequences always meet in one forward.
// - dpo: the actor (a language model) learns to prefer each chosen response
//   over its rejected one relative to a frozen reference ([roles.ref], or
//   the actor's initial weights), computed on the actor's own processes and
//   mesh under no_grad with the same tp and sp splits; with [colocate] sleep
//   the reference waits in host memory while the actor trains. Loss and
//   metrics are TRL's DPOTrainer's (dpo_loss.hpp): with policy == reference
//   every margin is 0 and the sigmoid loss is exactly ln 2.
// - rm: the actor gets a scalar head (a language model's lm_head replaced
//   by a fresh `score` head) and learns -log σ(s_chosen − s_rejected) on the
//   scores at each sequence's last token (TRL's RewardTrainer); its output
//   is a Hugging Face *ForSequenceClassification directory that a PPO
//   recipe's [roles.reward] model loads.
// A checkpoint holds the actor's engine state, the random state and the
// sampler's position (the DPO reference is rebuilt from its source).
#pragma once

#include "meshrun/train/run.hpp"

namespace meshrun {

struct Plan;
class Runtime;

// Run the whole job on this rank (the run shell: resume, checkpoints,
// export), from the resolved plan only. Throw like run_sft.
RunSummary run_dpo(const Plan& plan, Runtime& runtime);
RunSummary run_rm(const Plan& plan, Runtime& runtime);

}  // namespace meshrun
