// Test support: builtin:tiny in a TrainEngine of one process after one
// optimizer step (so Adam's moments are not zero), and the rank-file state
// a trainer would checkpoint for it. Used by the checkpoint tests of
// tests/train and tests/cli.
#pragma once

#include <memory>

#include "meshrun/model/model.hpp"
#include "meshrun/train/train_engine.hpp"
#include "meshrun/train/training_checkpoint.hpp"

namespace meshrun::test {

struct TrainedTiny {
  LlamaModel model{nullptr};
  std::unique_ptr<TrainEngine> engine;

  train_detail::RankState rank_state(Precision dtype = Precision::fp32) {
    train_detail::RankState state;
    state.add_engine("actor", *engine, model->options().config, ModelHead::language_model, dtype);
    state.add_rng_states(torch::kCPU);
    return state;
  }
};

inline TrainedTiny trained_tiny_engine(int zero_stage, int seed, double bucket_mb = 25) {
  ModelOptions model_options;
  model_options.config = *builtin_model_config("builtin:tiny");
  torch::manual_seed(seed);
  TrainedTiny out;
  out.model = LlamaModel(model_options);
  EngineOptions options;
  options.zero_stage = zero_stage;
  options.bucket_mb = bucket_mb;
  out.engine = std::make_unique<TrainEngine>(out.model, nullptr, nullptr, options);
  ModelInputs inputs;
  inputs.input_ids = torch::randint(259, {2, 6}, torch::kInt64);
  out.engine->backward(out.engine->forward(inputs).mean());
  out.engine->step();
  return out;
}

}  // namespace meshrun::test
