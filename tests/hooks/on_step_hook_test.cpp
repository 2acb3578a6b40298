#include <doctest/doctest.h>

#include <lua.hpp>

#include "hook_batch_test_support.hpp"
#include "meshrun/hooks/hook_batch.hpp"

using meshrun::call_on_step_hook;
using meshrun::HookError;
using meshrun::HookScript;
using meshrun::hooks_test::batch_fixture;
using meshrun::hooks_test::hook_failure;
using Metrics = std::vector<std::pair<std::string, double>>;

namespace {

std::unique_ptr<HookScript> step_hooks() {
  return HookScript::load(batch_fixture("step_hooks.lua"), {});
}

}  // namespace

TEST_CASE("on_step gets the step and its metrics, and returns extra metrics sorted by name") {
  auto script = step_hooks();
  const Metrics extra = call_on_step_hook(*script, "derived", 12, {{"loss", 0.75}, {"lr", 1e-5}});
  CHECK(extra ==
        Metrics{
            {"count", 2}, {"diverged", 0}, {"improving", 1}, {"loss_x2", 1.5}, {"step_seen", 12}});
  CHECK(lua_gettop(script->state()) == 0);
}

TEST_CASE("on_step may return nil or an empty table") {
  auto script = step_hooks();
  CHECK(call_on_step_hook(*script, "nothing", 1, {}).empty());
  CHECK(call_on_step_hook(*script, "empty", 1, {{"loss", 1}}).empty());
}

TEST_CASE("on_step results that are not metrics are errors") {
  struct Case {
    const char* function;
    const char* message;
  };
  const Case cases[] = {
      {"number_key",
       "number_key returned a metric under a number key; metric names must be strings"},
      {"nan_metric", "nan_metric metric 'bad' is nan"},
      {"inf_metric", "inf_metric metric 'big' is inf"},
      {"many_metrics", "many_metrics returned more than 256 metrics; at most 256 a step are logged"},
      {"string_metric", "string_metric metric 'name' is a string, expected a number or a boolean"},
      {"returns_number",
       "returns_number must return nil or a table of metrics (name = number), got a number"},
  };
  auto script = step_hooks();
  for (const Case& c : cases) {
    CAPTURE(c.function);
    const HookError error = hook_failure([&] { call_on_step_hook(*script, c.function, 1, {}); });
    CHECK(error.message() == c.message);
    CHECK(error.hook_point() == c.function);
    CHECK(error.line() > 0);
    CHECK(lua_gettop(script->state()) == 0);
  }
}

TEST_CASE("a runtime error in on_step names its line") {
  auto script = step_hooks();
  const HookError error = hook_failure([&] {
    call_on_step_hook(*script, "runtime_error", 3, {{"loss", 1}});
  });
  CHECK(error.line() == 24);
  CHECK(error.hook_point() == "runtime_error");
  CHECK(error.message() == "attempt to perform arithmetic on field 'missing' (a nil value)");
}

TEST_CASE("on_step cannot replace the step's built-in metrics or use reserved names") {
  meshrun::hooks_test::ScratchFolder scratch;
  const std::string path = scratch.write(
      "names.lua",
      "function overwrite() return {reward_mean = 42} end\n"
      "function empty_name() return {[''] = 1} end\n"
      "function step_name() return {step = 1} end\n"
      "function time_name() return {time = 5} end\n"
      "function bad_utf8() return {['ok\\255'] = 1} end\n"
      "function fresh() return {reward_mean_smoothed = 1} end\n");
  auto script = HookScript::load(path, {});
  const Metrics built_in = {{"reward_mean", 0.5}, {"kl", 0.1}};
  struct Case {
    const char* function;
    const char* message;
  };
  const Case cases[] = {
      {"overwrite",
       "overwrite returned a metric under the name 'reward_mean' of a built-in metric of this "
       "step (it would replace the real value; pick another name)"},
      {"empty_name", "empty_name returned a metric under an empty name"},
      {"step_name", "step_name returned a metric under the name 'step', which is the row's own key"},
      {"time_name", "time_name returned a metric under the name 'time', which is the row's own key (its wall-clock time)"},
      {"bad_utf8", "bad_utf8 returned a metric under a name that is not valid UTF-8 (byte 2)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.function);
    const HookError error =
        hook_failure([&] { call_on_step_hook(*script, c.function, 1, built_in); });
    CHECK(error.message() == c.message);
    CHECK(error.hook_point() == c.function);
    CHECK(error.script() == path);
    CHECK(error.line() > 0);
  }
  CHECK(call_on_step_hook(*script, "fresh", 1, built_in) ==
        Metrics{{"reward_mean_smoothed", 1.0}});
}
