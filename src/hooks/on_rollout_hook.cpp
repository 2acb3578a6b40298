// The on_rollout hook point: on_rollout(batch) may rewrite samples through
// writable views, drop them with batch:drop(i), and return nil or one keep
// flag per sample.
#include <lua.hpp>
#include <string>

#include "hook_batch_binding.hpp"
#include "hook_call.hpp"

namespace meshrun {
namespace {

using hooks_detail::count_entries;
using hooks_detail::describe_type;
using hooks_detail::throw_bad_result;

std::string samples(int64_t count) {
  return std::to_string(count) + (count == 1 ? " sample" : " samples");
}

// The keep flags returned on top of the stack; nil keeps every sample.
std::vector<bool> read_keep_flags(const HookScript& script, std::string_view hook_point, int line,
                                  int64_t size) {
  lua_State* state = script.state();
  const int result = lua_gettop(state);
  std::vector<bool> keep(static_cast<std::size_t>(size), true);
  if (lua_isnil(state, result)) return keep;
  if (!lua_istable(state, result)) {
    throw_bad_result(script, hook_point, line,
                     std::string(hook_point) + " must return nil or a table of " +
                         std::to_string(size) + " keep flags (booleans, one per sample), got " +
                         describe_type(state, result));
  }
  const int64_t entries = count_entries(state, result);
  if (entries != size) {
    throw_bad_result(script, hook_point, line,
                     std::string(hook_point) + " returned " + std::to_string(entries) +
                         " keep flags for a batch of " + samples(size));
  }
  for (int64_t sample = 1; sample <= size; ++sample) {
    lua_rawgeti(state, result, static_cast<int>(sample));
    if (lua_type(state, -1) != LUA_TBOOLEAN) {
      throw_bad_result(script, hook_point, line,
                       std::string(hook_point) + " keep flag " + std::to_string(sample) + " is " +
                           describe_type(state, -1) + ", expected true or false");
    }
    keep[static_cast<std::size_t>(sample - 1)] = lua_toboolean(state, -1);
    lua_pop(state, 1);
  }
  return keep;
}

}  // namespace

std::vector<bool> call_on_rollout_hook(HookScript& script, std::string_view function,
                                       HookBatch& batch) {
  hooks_detail::StackRestorer restore_stack(script.state());
  hooks_detail::OpenBatch open(script, function, batch, hooks_detail::BatchAccess::rewritable);
  const int line = hooks_detail::push_hook_function(script, function);
  open.push();
  try {
    hooks_detail::call_hook(script, function, 1);
  } catch (const HookError& error) {
    throw hooks_detail::with_last_sample(error, open, batch.size);
  }
  const std::vector<int64_t> dropped = open.close();
  std::vector<bool> keep = read_keep_flags(script, function, line, batch.size);
  for (int64_t sample : dropped) keep[static_cast<std::size_t>(sample)] = false;
  return keep;
}

}  // namespace meshrun
