// Environments of multi-turn episodes (include/meshrun/hooks/env.hpp):
// reset and step with their ctx and state, results of the wrong shape,
// runtime errors, runaway environments (wall clock, instructions, memory)
// and scripts without reset or step: located HookErrors naming the
// function and the episode's sample, never a hang.
#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "hook_test_support.hpp"
#include "meshrun/hooks/env.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {
namespace env_hook_test {

using hooks_test::ScratchFolder;

constexpr const char* kEnv = R"(local env = {}
function env.reset(ctx)
  return {prompt = ctx.prompt, label = ctx.label, index = ctx.index, sample = ctx.sample, turns = 0,
          first = ctx.messages and ctx.messages[1].content or "none"}
end
function env.step(state, reply, ctx)
  state.turns = state.turns + 1
  if reply == "shape" then return 42 end
  if reply == "nan" then return {reward = 0 / 0} end
  if reply == "huge" then return {reward = -1e300} end
  if reply == "done" then return {done = "yes"} end
  if reply == "observation" then return {observation = 12} end
  if reply == "reward" then return {reward = "1"} end
  if reply == "error" then error("the environment broke") end
  if reply == "loop" then while true do end end
  if reply == "memory" then local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 100) .. i end end
  return {observation = state.prompt .. "/" .. tostring(state.label) .. "/" .. state.index .. "/" .. state.sample ..
                        "/" .. state.first .. "/" .. reply .. "/" .. state.turns .. "/" .. (ctx == nil and "" or "ctx"),
          reward = state.turns / 2}
end
return env
)";

HookOptions options(double seconds = 10, long long instructions = 100'000'000) {
  HookOptions out;
  out.wall_seconds = seconds;
  out.instruction_limit = instructions;
  out.memory_limit_mb = 32;
  return out;
}

HookError step_failure(const std::string& reply, const HookOptions& limits = options()) {
  ScratchFolder folder;
  auto env = EnvScript::load(folder.write("env.lua", kEnv), limits);
  const nlohmann::json label = 5;
  auto episode = env->reset(EnvContext{"p", nullptr, &label, 9, 2});
  try {
    env->step(*episode, reply);
  } catch (const HookError& error) {
    return error;
  }
  FAIL("step did not fail");
  return HookError("", 0, "", "", "");
}

}  // namespace env_hook_test

using namespace env_hook_test;

TEST_CASE("env: reset builds the episode's state from ctx; step sees it, the reply and ctx") {
  ScratchFolder folder;
  auto env = EnvScript::load(folder.write("env.lua", kEnv), options());
  const nlohmann::json label = {{"value", 3}};
  const nlohmann::json messages = nlohmann::json::array({{{"role", "user"}, {"content", "hello"}}});
  auto first = env->reset(EnvContext{"guess", &messages, &label, 4, 1});
  auto second = env->reset(EnvContext{"other", nullptr, nullptr, 5, 2});
  EnvStepResult result = env->step(*first, "a");
  REQUIRE(result.observation);
  CHECK(result.observation->starts_with("guess/table: "));
  CHECK(result.observation->ends_with("/4/1/hello/a/1/ctx"));
  CHECK(result.reward == 0.5);
  CHECK_FALSE(result.done);
  // Each episode keeps its own state.
  CHECK(*env->step(*second, "b").observation == "other/nil/5/2/none/b/1/ctx");
  CHECK(env->step(*first, "c").reward == 1.0);
}

TEST_CASE("env: results of the wrong shape name the function, the sample and what was wrong") {
  struct Case {
    const char* reply;
    const char* message;
  };
  const Case cases[] = {
      {"shape",
       "episode of sample 9: step must return a table {observation = string or nil, reward = number or nil, done = "
       "boolean or nil}, got a number"},
      {"nan", "episode of sample 9: its reward is nan, expected a finite number"},
      {"huge", "episode of sample 9: its reward is -1e+300, beyond ±1e+30 (the reward statistics would overflow)"},
      {"done", "episode of sample 9: its done is a string, expected a boolean"},
      {"observation", "episode of sample 9: its observation is a number, expected a string or nil"},
      {"reward", "episode of sample 9: its reward is a string, expected a number or nil"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.reply);
    const HookError error = step_failure(c.reply);
    CHECK(error.message() == c.message);
    CHECK(error.hook_point() == "step");
    CHECK(error.line() == 6);  // where step is defined
  }
}

TEST_CASE("env: a runtime error is located at its line, with the sample") {
  const HookError error = step_failure("error");
  CHECK(error.hook_point() == "step");
  CHECK(error.line() == 14);
  CHECK(error.message().starts_with("episode of sample 9: "));
  CHECK(error.message().find("the environment broke") != std::string::npos);
}

TEST_CASE("env: runaway environments end with the limit they hit") {
  SUBCASE("wall clock") {
    const auto begin = std::chrono::steady_clock::now();
    const HookError error = step_failure("loop", options(0.3, 0));
    CHECK(std::chrono::steady_clock::now() - begin < std::chrono::seconds(20));
    CHECK(error.message().find("episode of sample 9") != std::string::npos);
    CHECK(error.hook_point() == "step");
  }
  SUBCASE("instructions") {
    const HookError error = step_failure("loop", options(60, 100'000));
    CHECK(error.message().find("instruction") != std::string::npos);
  }
  SUBCASE("memory") {
    const HookError error = step_failure("memory", options(60, 0));
    CHECK(error.message().find("memory limit of 32 MiB exceeded") != std::string::npos);
  }
}

TEST_CASE("env: a script without reset or step is refused at load") {
  ScratchFolder folder;
  const std::string path = folder.write("half.lua", "function reset(ctx) return nil end\n");
  try {
    EnvScript::load(path, options());
    FAIL("loaded");
  } catch (const HookError& error) {
    CHECK(error.hook_point() == "load");
    CHECK(error.message().find("no function 'step'") != std::string::npos);
  }
  // Globals work as well as a returned table, and nil is a state.
  const std::string globals =
      folder.write("globals.lua", "function reset(ctx) return nil end\n"
                                  "function step(state, reply) return {done = state == nil} end\n");
  auto env = EnvScript::load(globals, options());
  auto episode = env->reset(EnvContext{"p", nullptr, nullptr, 1, 1});
  const EnvStepResult result = env->step(*episode, "x");
  CHECK(result.done);
  CHECK_FALSE(result.observation);
  CHECK(result.reward == 0);
}

}  // namespace meshrun
