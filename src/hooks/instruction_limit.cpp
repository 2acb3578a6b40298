#include "instruction_limit.hpp"

#include <algorithm>
#include <cstdio>

#include "batch_runtime.hpp"
#include "memory_budget.hpp"
#include "script_environment.hpp"

namespace meshrun::hooks_detail {
namespace {

// Its address is the registry key of the CallLimits now armed for a state.
const char active_limits_key = 0;

CallLimits* active_limits(lua_State* state) {
  return static_cast<CallLimits*>(registry_pointer(state, &active_limits_key));
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

// Its address is the registry key of the state's nested-call depth, an int
// in a userdata (never moved by LuaJIT's collector).
const char nested_call_depth_key = 0;

int* nested_call_depth(lua_State* state) {
  auto* depth = static_cast<int*>(registry_pointer(state, &nested_call_depth_key));
  if (depth != nullptr) return depth;
  // Only for a state not set up by prepare_call_limit_slots; the guard runs
  // inside a Lua call, so an allocation failure here is a plain Lua error.
  lua_pushlightuserdata(state, const_cast<char*>(&nested_call_depth_key));
  depth = static_cast<int*>(lua_newuserdata(state, sizeof(int)));
  *depth = 0;
  lua_rawset(state, LUA_REGISTRYINDEX);
  return depth;
}

// The level of the innermost frame outside the batch runtime: a limit that
// fires inside a view access is the doing of the script's loop around it,
// and the runtime's own lines mean nothing to the script's author.
int blamed_level(lua_State* state, int first_level) {
  lua_Debug frame;
  for (int level = first_level; lua_getstack(state, level, &frame) != 0; ++level) {
    lua_getinfo(state, "S", &frame);
    if (!is_batch_runtime_source(frame.source)) return level;
  }
  return first_level;
}

constexpr int hook_interval = 1000;
constexpr const char* instruction_limit_format = "instruction limit of %lld exceeded";
constexpr const char* wall_clock_format = "wall-clock limit of %g s exceeded";
constexpr const char* memory_limit_format = "memory limit of %zu MiB exceeded";
constexpr double longest_deadline_seconds = 1e9;  // keeps the time_point arithmetic finite

}  // namespace

bool is_limit_message(std::string_view message) {
  // The text before each format's first conversion, and its fixed ending.
  const auto matches = [message](std::string_view format) {
    const std::string_view head = format.substr(0, format.find('%'));
    const std::string_view tail = " exceeded";
    return message.starts_with(head) && message.ends_with(tail);
  };
  return matches(instruction_limit_format) || matches(wall_clock_format) ||
         matches(memory_limit_format);
}

std::string memory_limit_message(std::size_t limit_bytes) {
  char text[64];
  std::snprintf(text, sizeof text, memory_limit_format, limit_bytes >> 20);
  return text;
}

void prepare_call_limit_slots(lua_State* state) {
  set_active_limits(state, nullptr);
  nested_call_depth(state);
}

NestedCallGuard::NestedCallGuard(lua_State* state, const char* what)
    : depth_(nested_call_depth(state)) {
  if (*depth_ >= max_nested_calls) {
    luaL_error(state, "C stack overflow: %s calls back into Lua nested too deeply (over %d levels)",
               what, max_nested_calls);
  }
  ++*depth_;
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
      outer_count_(lua_gethookcount(state)),
      budget_(MemoryBudget::of(state)) {
  // Before the budget is enforced: this runs unprotected, and a refused
  // allocation would make LuaJIT's panic end the process.
  set_active_limits(state_, this);
  lua_sethook(state_, &CallLimits::on_count, LUA_MASKCOUNT, interval_);
  if (budget_ != nullptr) outer_enforcing_ = budget_->set_enforcing(true);
}

CallLimits::~CallLimits() {
  if (budget_ != nullptr) budget_->set_enforcing(outer_enforcing_);
  set_active_limits(state_, outer_);
  lua_sethook(state_, outer_hook_, outer_mask_, outer_count_);
  if (outer_ != nullptr) outer_->executed_ += executed_;
}

const CallLimits* CallLimits::active(lua_State* state) { return active_limits(state); }

void CallLimits::on_count(lua_State* state, lua_Debug*) {
  if (CallLimits* limits = active_limits(state)) limits->check_limits(state);
}

void CallLimits::note_exceeded() {
  if (instruction_limit_ > 0 && executed_ > instruction_limit_) {
    std::snprintf(exceeded_message_, sizeof exceeded_message_, instruction_limit_format,
                  instruction_limit_);
  } else if (wall_seconds_ > 0 && std::chrono::steady_clock::now() >= deadline_) {
    std::snprintf(exceeded_message_, sizeof exceeded_message_, wall_clock_format, wall_seconds_);
  }
}

void CallLimits::raise_exceeded(lua_State* state, int first_level) {
  // From now on every instruction raises again, so a script that swallows
  // the error with pcall cannot go on running.
  lua_sethook(state, &CallLimits::on_count, LUA_MASKCOUNT, 1);
  luaL_where(state, blamed_level(state, first_level));
  lua_pushstring(state, exceeded_message_);
  lua_concat(state, 2);
  lua_error(state);
  __builtin_unreachable();  // lua_error does not return
}

void CallLimits::remember_location(lua_State* state) {
  lua_Debug frame;
  if (lua_getstack(state, blamed_level(state, 0), &frame) == 0) return;
  lua_getinfo(state, "Sl", &frame);
  if (frame.currentline <= 0) return;
  std::snprintf(last_location_, sizeof last_location_, "%s:%d:", frame.short_src,
                frame.currentline);
}

void CallLimits::check_limits(lua_State* state) {
  if (!exceeded()) {
    executed_ += interval_;
    note_exceeded();
    if (!exceeded()) {
      // Only near the limit: finding the line costs about as much as the
      // thousand instructions between two hooks.
      if (budget_ != nullptr && budget_->limit() != 0 && budget_->used() > budget_->limit() / 2) {
        remember_location(state);
        budget_->collect_if_due(state);
      }
      return;
    }
  }
  // Level 0 inside a hook is the Lua function being run.
  raise_exceeded(state, 0);
}

void CallLimits::charge(lua_State* state, long long instructions, int caller_level) {
  if (!exceeded()) {
    executed_ += instructions;
    note_exceeded();
    if (!exceeded()) return;
  }
  raise_exceeded(state, caller_level);
}

void charge_instructions(lua_State* state, long long instructions, int caller_level) {
  if (CallLimits* limits = active_limits(state)) limits->charge(state, instructions, caller_level);
}

}  // namespace meshrun::hooks_detail
