// The env hook points (include/meshrun/hooks/env.hpp): reset(ctx) and
// step(state, reply, ctx) of a multi-turn episode's environment.
#include "meshrun/hooks/env.hpp"

#include <cmath>
#include <lua.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "hook_batch_binding.hpp"
#include "hook_call.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {
namespace {

using hooks_detail::describe_type;

constexpr const char* kStepShape = "{observation = string or nil, reward = number or nil, done = boolean or nil}";

// ctx as a Lua table; built under lua_cpcall (build_protected).
void build_context(lua_State* state, const void* raw) {
  const auto& context = *static_cast<const EnvContext*>(raw);
  lua_createtable(state, 0, 5);
  lua_pushlstring(state, context.prompt.data(), context.prompt.size());
  lua_setfield(state, -2, "prompt");
  lua_pushnumber(state, static_cast<double>(context.index));
  lua_setfield(state, -2, "index");
  lua_pushnumber(state, static_cast<double>(context.sample));
  lua_setfield(state, -2, "sample");
  for (const auto& [key, value] : {std::pair{"label", context.label}, std::pair{"messages", context.messages}}) {
    if (!value) continue;
    if (!hooks_detail::push_json(state, *value, 1))
      luaL_error(state, "the episode's %s nests deeper than %d levels", key, kMaxLabelDepth);
    lua_setfield(state, -2, key);
  }
}

// A HookError of the episode's call, its message led by the sample.
HookError of_episode(const HookError& error, int64_t index) {
  return HookError(error.script(), error.line(), error.hook_point(),
                   "episode of sample " + std::to_string(index) + ": " + error.message(), error.traceback());
}

}  // namespace

EnvEpisode::~EnvEpisode() {
  luaL_unref(state_, LUA_REGISTRYINDEX, context_);
  luaL_unref(state_, LUA_REGISTRYINDEX, state_value_);
}

HookOptions env_options_of(const HooksConfig& hooks, double timeout_s) {
  HookOptions options = hook_options_of(hooks);
  options.wall_seconds = timeout_s;
  return options;
}

std::unique_ptr<EnvScript> EnvScript::load(const std::string& path, const HookOptions& options) {
  std::unique_ptr<HookScript> script = HookScript::load(path, options);
  for (const char* name : {"reset", "step"})
    if (!script->has_function(name))
      throw HookError(path, 0, "load",
                      std::string("an environment defines reset(ctx) and step(state, reply, ctx); this script has no "
                                  "function '") +
                          name + "' (as a global or in the table it returns)",
                      "");
  return std::unique_ptr<EnvScript>(new EnvScript(std::move(script)));
}

std::unique_ptr<EnvEpisode> EnvScript::reset(const EnvContext& context) {
  lua_State* state = script_->state();
  hooks_detail::StackRestorer restore_stack(state);
  std::unique_ptr<EnvEpisode> episode(new EnvEpisode(state, context.index));
  try {
    episode->context_ = hooks_detail::build_protected(*script_, "reset", build_context, &context);
    hooks_detail::push_hook_function(*script_, "reset");
    lua_rawgeti(state, LUA_REGISTRYINDEX, episode->context_);
    hooks_detail::call_hook(*script_, "reset", 1);
  } catch (const HookError& error) {
    throw of_episode(error, context.index);
  }
  // Outside calls the state's allocations are never refused (memory_budget.hpp).
  episode->state_value_ = luaL_ref(state, LUA_REGISTRYINDEX);
  return episode;
}

EnvStepResult EnvScript::step(EnvEpisode& episode, std::string_view reply) {
  lua_State* state = script_->state();
  hooks_detail::StackRestorer restore_stack(state);
  int line = 0;
  try {
    line = hooks_detail::push_hook_function(*script_, "step");
    lua_rawgeti(state, LUA_REGISTRYINDEX, episode.state_value_);
    lua_pushlstring(state, reply.data(), reply.size());
    lua_rawgeti(state, LUA_REGISTRYINDEX, episode.context_);
    hooks_detail::call_hook(*script_, "step", 3);
  } catch (const HookError& error) {
    throw of_episode(error, episode.index());
  }
  const auto fail = [&](const std::string& problem) {
    hooks_detail::throw_bad_result(*script_, "step", line,
                                   "episode of sample " + std::to_string(episode.index()) + ": " + problem);
  };
  const int result = lua_gettop(state);
  if (!lua_istable(state, result))
    fail("step must return a table " + std::string(kStepShape) + ", got " + describe_type(state, result));
  EnvStepResult out;
  // Raw reads: a metatable on the result runs no code outside the limits.
  lua_pushliteral(state, "observation");
  lua_rawget(state, result);
  if (lua_type(state, -1) == LUA_TSTRING) {
    size_t length = 0;
    const char* text = lua_tolstring(state, -1, &length);
    out.observation = std::string(text, length);
  } else if (!lua_isnil(state, -1)) {
    fail("its observation is " + describe_type(state, -1) + ", expected a string or nil");
  }
  lua_pop(state, 1);
  lua_pushliteral(state, "reward");
  lua_rawget(state, result);
  if (lua_type(state, -1) == LUA_TNUMBER) {
    out.reward = lua_tonumber(state, -1);
    if (!std::isfinite(out.reward))
      fail(std::string("its reward is ") + (std::isnan(out.reward) ? "nan" : out.reward > 0 ? "inf" : "-inf") +
           ", expected a finite number");
    if (std::abs(out.reward) > hooks_detail::kMaxRewardMagnitude)
      fail(fmt::format("its reward is {:g}, beyond ±{:g} (the reward statistics would overflow)", out.reward,
                       hooks_detail::kMaxRewardMagnitude));
  } else if (!lua_isnil(state, -1)) {
    fail("its reward is " + describe_type(state, -1) + ", expected a number or nil");
  }
  lua_pop(state, 1);
  lua_pushliteral(state, "done");
  lua_rawget(state, result);
  if (lua_isboolean(state, -1)) out.done = lua_toboolean(state, -1) != 0;
  else if (!lua_isnil(state, -1)) fail("its done is " + describe_type(state, -1) + ", expected a boolean");
  lua_pop(state, 1);
  return out;
}

}  // namespace meshrun
