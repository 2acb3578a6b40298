// Internal to the hooks subsystem: the per-call limits of a hook. While a
// CallLimits is alive, a count hook fires every 1000 Lua instructions (fewer
// under a smaller limit), adds them to this call's counter and checks the
// wall-clock deadline; past either limit it raises a Lua error ("instruction
// limit of N exceeded", "wall-clock limit of S s exceeded") at the running
// line, and again at every following instruction so that pcall cannot
// swallow it.
//
// Limits apply only to interpreted code: LuaJIT never runs the hook inside
// JIT-compiled traces, which is why sandboxed states turn the JIT engine off.
// With the JIT on, a compiled hot loop outruns both limits (the deadline is
// checked by the same hook) and only the job-level timeout stops it. LuaJIT
// also runs the message handler of an error raised by the hook with hooks
// disabled; the sandbox's xpcall skips the script's handler for that reason.
// Work done in C on the script's behalf (the sandbox's pattern matching) is
// charged with charge_instructions, so it cannot run past the limits either.
//
// A CallLimits also switches the state's MemoryBudget on for the call, lets
// it collect garbage when due, and remembers the script line the hook last
// saw: LuaJIT raises its memory error without a traceback, and that line is
// where the report points.
//
// NestedCallGuard bounds the C stack: each call from one of our C functions
// back into Lua (a gsub replacement function, load's reader, a coroutine
// resume, a sort comparator, ...) nests a C frame that LuaJIT does not count,
// so a script recursing through one would overflow the stack and crash.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>
#include <lua.hpp>

#include "meshrun/hooks/hooks.hpp"

namespace meshrun::hooks_detail {

class MemoryBudget;

// Whether a hook's error message is one of the limits' own.
bool is_limit_message(std::string_view message);

// "memory limit of N MiB exceeded", for a MemoryBudget of `limit_bytes`.
std::string memory_limit_message(std::size_t limit_bytes);

// Adds `instructions` to the call armed for `state`, if any, and raises the
// limit's error (located at `caller_level`, 1 for the script line calling
// a C function) when it is now over a limit.
void charge_instructions(lua_State* state, long long instructions, int caller_level);

// Creates the registry slots that CallLimits and NestedCallGuard use, so
// that arming a call never allocates (an allocation refused by the memory
// budget outside a protected call would end the process). Run it protected,
// when the state is set up.
void prepare_call_limit_slots(lua_State* state);

// Held by a C function of ours while it calls back into Lua. Past
// `max_nested_calls` nested guards in one state it raises "C stack
// overflow: ..." at the script line calling the C function instead. The
// depth is restored when the guard goes out of scope, Lua error included
// (LuaJIT unwinds C++ frames on x64).
class NestedCallGuard {
 public:
  // Lua 5.1's LUAI_MAXCCALLS. One level costs our C frame (~1 KiB, the
  // buffers live on the Lua heap) and LuaJIT's call frames (a few hundred
  // bytes): well under 1 MiB for all of them, inside even a 2 MiB thread
  // stack; hooks run on the calling thread (main thread, 8 MiB by default).
  static constexpr int max_nested_calls = 200;

  // `what` names the C function for the message ("string.gsub").
  NestedCallGuard(lua_State* state, const char* what);
  ~NestedCallGuard() { --*depth_; }
  NestedCallGuard(const NestedCallGuard&) = delete;
  NestedCallGuard& operator=(const NestedCallGuard&) = delete;

 private:
  int* depth_;
};

class CallLimits {
 public:
  // Arms the hook for `state`; nests (an inner call gets its own counter, and
  // its instructions are added to the outer one when it ends). A limit <= 0
  // disables that check.
  CallLimits(lua_State* state, const HookOptions& options);
  ~CallLimits();
  CallLimits(const CallLimits&) = delete;
  CallLimits& operator=(const CallLimits&) = delete;

  // The limits armed for the call now running in `state`, if any.
  static const CallLimits* active(lua_State* state);

  // Whether a limit was hit during the call, even if the script swallowed the
  // error with pcall.
  bool exceeded() const { return exceeded_message_[0] != '\0'; }
  const char* exceeded_message() const { return exceeded_message_; }
  long long instructions_executed() const { return executed_; }

  // "SOURCE:LINE:" of the script line the count hook last saw; empty if none.
  const char* last_location() const { return last_location_; }

  void charge(lua_State* state, long long instructions, int caller_level);

 private:
  static void on_count(lua_State* state, lua_Debug* debug);
  void check_limits(lua_State* state);
  // Records the exceeded limit's message, if one is now exceeded.
  void note_exceeded();
  [[noreturn]] void raise_exceeded(lua_State* state, int first_level);
  void remember_location(lua_State* state);

  lua_State* state_;
  long long instruction_limit_;
  double wall_seconds_;
  std::chrono::steady_clock::time_point deadline_;
  int interval_;
  long long executed_ = 0;
  // Fixed-size so that raising the Lua error never has to unwind a C++ allocation.
  char exceeded_message_[96] = {};
  char last_location_[LUA_IDSIZE + 16] = {};

  CallLimits* outer_;
  lua_Hook outer_hook_;
  int outer_mask_;
  int outer_count_;
  MemoryBudget* budget_;
  bool outer_enforcing_ = false;
};

}  // namespace meshrun::hooks_detail
