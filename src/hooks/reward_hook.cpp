// The reward hook point: reward(batch) -> one finite number per sample.
#include <cmath>

#include <fmt/format.h>
#include <lua.hpp>
#include <string>

#include "hook_batch_binding.hpp"
#include "hook_call.hpp"

namespace meshrun {
namespace {

using hooks_detail::count_entries;
using hooks_detail::describe_type;
using hooks_detail::throw_bad_result;

std::string count_of(int64_t count, const char* one, const char* many) {
  return std::to_string(count) + " " + (count == 1 ? one : many);
}

// Reads the result on top of the stack; raw access only, so the result's
// metatable (if any) runs no code outside the limits.
std::vector<double> read_rewards(const HookScript& script, std::string_view hook_point, int line,
                                 int64_t size) {
  lua_State* state = script.state();
  const int result = lua_gettop(state);
  if (!lua_istable(state, result)) {
    throw_bad_result(script, hook_point, line,
                     std::string(hook_point) + " must return a table of " +
                         count_of(size, "number", "numbers") + " (one per sample), got " +
                         describe_type(state, result));
  }
  const int64_t entries = count_entries(state, result);
  if (entries != size) {
    throw_bad_result(script, hook_point, line,
                     std::string(hook_point) + " returned " + count_of(entries, "value", "values") +
                         " for a batch of " + count_of(size, "sample", "samples"));
  }
  std::vector<double> rewards;
  rewards.reserve(static_cast<std::size_t>(size));
  for (int64_t sample = 1; sample <= size; ++sample) {
    lua_rawgeti(state, result, static_cast<int>(sample));
    auto fail = [&](const std::string& problem) {
      throw_bad_result(
          script, hook_point, line,
          std::string(hook_point) + " value " + std::to_string(sample) + " is " + problem);
    };
    if (lua_type(state, -1) != LUA_TNUMBER) fail(describe_type(state, -1) + ", expected a number");
    const double value = lua_tonumber(state, -1);
    lua_pop(state, 1);
    if (std::isnan(value)) fail("nan");
    if (std::isinf(value)) fail(value > 0 ? "inf" : "-inf");
    if (std::abs(value) > hooks_detail::kMaxRewardMagnitude)
      fail(fmt::format("{:g}, beyond ±{:g} (the reward statistics would overflow)", value, hooks_detail::kMaxRewardMagnitude));
    rewards.push_back(value);
  }
  return rewards;
}

}  // namespace

std::vector<double> call_reward_hook(HookScript& script, std::string_view function,
                                     const HookBatch& batch) {
  hooks_detail::StackRestorer restore_stack(script.state());
  hooks_detail::OpenBatch open(script, function, batch, hooks_detail::BatchAccess::read_only);
  const int line = hooks_detail::push_hook_function(script, function);
  open.push();
  try {
    hooks_detail::call_hook(script, function, 1);
  } catch (const HookError& error) {
    throw hooks_detail::with_last_sample(error, open, batch.size);
  }
  open.close();
  return read_rewards(script, function, line, batch.size);
}

}  // namespace meshrun
