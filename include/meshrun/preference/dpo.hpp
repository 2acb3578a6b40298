// Direct preference optimisation (algorithm = "dpo"): the actor learns to
// prefer each pair's chosen response over its rejected one, relative to a
// frozen reference ([roles.ref], or the actor's initial weights).
//
// A step takes batch.train pairs (data/preference.hpp); every micro-batch
// holds whole pairs, so a pair's two sequences always meet in one forward.
// The reference's log-probabilities are computed on the actor's own
// processes and mesh, under no_grad, with the same tp and sp splits; with
// [colocate] sleep the reference waits in host memory while the actor
// trains. Loss and metrics are those of TRL's DPOTrainer: with policy ==
// reference every margin is 0 and the sigmoid loss is exactly ln 2.
// A checkpoint holds the actor's engine state, the random state and the
// sampler's position; the reference is rebuilt from its source on resume.
#pragma once

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/train/run.hpp"

namespace meshrun {

struct Plan;
class Runtime;

// Runs the whole DPO job on this rank (the run shell: resume, checkpoints,
// export). Throws like run_sft.
RunSummary run_dpo(const Recipe& recipe, const Plan& plan, Runtime& runtime);

}  // namespace meshrun
