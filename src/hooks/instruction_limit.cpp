#include "instruction_limit.hpp"

#include <algorithm>
#include <cstdio>

#include "batch_runtime.hpp"

namespace meshrun::hooks_detail {
namespace {

// Its address is the registry key of the CallLimits now armed for a state.
const char active_limits_key = 0;

CallLimits* active_limits(lua_State* state) {
  lua_pushlightuserdata(state, const_cast<char*>(&active_limits_key));
  lua_rawget(state, LUA_REGISTRYINDEX);
  auto* limits = static_cast<CallLimits*>(lua_touserdata(state, -1));
  lua_pop(state, 1);
  return limits;
}

void set_active_limits(lua_State* state, CallLimits* limits) {
  lua_pushlightuserdata(state, const_cast<char*>(&active_limits_key));
  // false rather than nil keeps the registry slot, so later calls never allocate here.
  if (limits != nullptr) {
    lua_pushlightuserdata(state, limits);
  } else {
    lua_pushboolean(state, 0);
  }
  lua_rawset(state, LUA_REGISTRYINDEX);
}

// The level of the innermost frame outside the batch runtime: a limit that
// fires inside a view access is the doing of the script's loop around it,
// and the runtime's own lines mean nothing to the script's author.
int blamed_level(lua_State* state) {
  lua_Debug frame;
  for (int level = 0; lua_getstack(state, level, &frame) != 0; ++level) {
    lua_getinfo(state, "S", &frame);
    if (!is_batch_runtime_source(frame.source)) return level;
  }
  return 0;
}

constexpr int hook_interval = 1000;
constexpr const char* instruction_limit_format = "instruction limit of %lld exceeded";
constexpr const char* wall_clock_format = "wall-clock limit of %g s exceeded";
constexpr double longest_deadline_seconds = 1e9;  // keeps the time_point arithmetic finite

}  // namespace

bool is_limit_message(std::string_view message) {
  // The text before each format's first conversion, and its fixed ending.
  const auto matches = [message](std::string_view format) {
    const std::string_view head = format.substr(0, format.find('%'));
    const std::string_view tail = " exceeded";
    return message.starts_with(head) && message.ends_with(tail);
  };
  return matches(instruction_limit_format) || matches(wall_clock_format);
}

CallLimits::CallLimits(lua_State* state, const HookOptions& options)
    : state_(state),
      instruction_limit_(options.instruction_limit),
      wall_seconds_(options.wall_seconds),
      deadline_(std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                    std::chrono::duration<double>(
                        std::clamp(options.wall_seconds, 0.0, longest_deadline_seconds)))),
      interval_(instruction_limit_ > 0
                    ? static_cast<int>(std::min<long long>(hook_interval, instruction_limit_))
                    : hook_interval),
      outer_(active_limits(state)),
      outer_hook_(lua_gethook(state)),
      outer_mask_(lua_gethookmask(state)),
      outer_count_(lua_gethookcount(state)) {
  set_active_limits(state_, this);
  lua_sethook(state_, &CallLimits::on_count, LUA_MASKCOUNT, interval_);
}

CallLimits::~CallLimits() {
  set_active_limits(state_, outer_);
  lua_sethook(state_, outer_hook_, outer_mask_, outer_count_);
  if (outer_ != nullptr) outer_->executed_ += executed_;
}

const CallLimits* CallLimits::active(lua_State* state) { return active_limits(state); }

void CallLimits::on_count(lua_State* state, lua_Debug*) {
  if (CallLimits* limits = active_limits(state)) limits->check_limits(state);
}

void CallLimits::check_limits(lua_State* state) {
  if (!exceeded()) {
    executed_ += interval_;
    if (instruction_limit_ > 0 && executed_ > instruction_limit_) {
      std::snprintf(exceeded_message_, sizeof exceeded_message_,
                    instruction_limit_format, instruction_limit_);
    } else if (wall_seconds_ > 0 && std::chrono::steady_clock::now() >= deadline_) {
      std::snprintf(exceeded_message_, sizeof exceeded_message_,
                    wall_clock_format, wall_seconds_);
    }
    if (!exceeded()) return;
    // From now on every instruction raises again, so a script that swallows
    // the error with pcall cannot go on running.
    lua_sethook(state, &CallLimits::on_count, LUA_MASKCOUNT, 1);
  }
  // Level 0 inside a hook is the Lua function being run.
  luaL_where(state, blamed_level(state));
  lua_pushstring(state, exceeded_message_);
  lua_concat(state, 2);
  lua_error(state);
}

}  // namespace meshrun::hooks_detail
