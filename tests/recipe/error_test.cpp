// The error vocabulary (include/meshrun/error.hpp): every subsystem's error
// type carries its kind, and a failure caused by a recipe key prints like
// the lint diagnostic at that key.
#include "tests/dist/torch_doctest.hpp"

#include "diagnostic_matchers.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/data/dataset.hpp"
#include "meshrun/dist/dist.hpp"
#include "meshrun/launch/env.hpp"
#include "meshrun/error.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/hooks/hooks.hpp"
#include "meshrun/arch/model_config.hpp"
#include "meshrun/model/safetensors.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun {

TEST_CASE("each subsystem's error is a meshrun::Error of its kind") {
  CHECK(DataError({DataProblem{"d.jsonl", 3, "input", "missing"}}, 1).kind() == ErrorKind::data);
  CHECK(TokenizerError("bad").kind() == ErrorKind::data);
  CHECK(HookError("h.lua", 2, "reward", "oops", "").kind() == ErrorKind::hook);
  CHECK(DistError("rank 1 is gone").kind() == ErrorKind::dist);
  CHECK(LaunchEnvError("RANK unset").kind() == ErrorKind::config);
  CHECK(CheckpointError("torn").kind() == ErrorKind::io);
  CHECK(SafetensorsError("short").kind() == ErrorKind::io);
  CHECK(ModelConfigError("heads").kind() == ErrorKind::model);
  CHECK(ModelLoadError("missing").kind() == ErrorKind::model);
  CHECK(DiagnosticError(Diagnostics{}).kind() == ErrorKind::config);
  // Callers that catch std::runtime_error still catch them.
  CHECK_THROWS_AS(throw DistError("x"), std::runtime_error);
  for (ErrorKind kind : {ErrorKind::config, ErrorKind::data, ErrorKind::io, ErrorKind::dist, ErrorKind::hook,
                         ErrorKind::model, ErrorKind::internal})
    CHECK(std::string(error_kind_name(kind)).size() >= 2);
}

TEST_CASE("a run-time failure caused by a recipe key prints like lint") {
  const char* text = R"(algorithm = "ppo"
[roles.actor]
model = "builtin:tiny"
[batch]
rollout = 64
)";
  auto loaded = test::load_text(text, {}, "dir/run.toml");
  REQUIRE(loaded.recipe);
  const ConfigError error("the prompt file p.jsonl has 10 prompts, fewer than one rollout batch", "batch.rollout",
                          "batch.rollout-prompts");
  CHECK(error.kind() == ErrorKind::config);
  CHECK(describe_failure(error, &*loaded.recipe) ==
        "dir/run.toml:5:1: error: the prompt file p.jsonl has 10 prompts, fewer than one rollout batch "
        "[batch.rollout-prompts]");
  // Without the recipe, or without a key: the kind names it.
  CHECK(describe_failure(error, nullptr) ==
        "config error: the prompt file p.jsonl has 10 prompts, fewer than one rollout batch");
  CHECK(describe_failure(DistError("rank 1 is gone"), &*loaded.recipe) == "dist error: rank 1 is gone");
  CHECK(describe_failure(std::logic_error("plain"), nullptr) == "plain");
}

}  // namespace meshrun
