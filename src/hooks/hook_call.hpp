// Internal to the hooks subsystem: what the three hook points share when
// they call a script's function. The function is found as HookScript finds
// hooks, run through protected_call under the script's limits, and every
// failure, including a result of the wrong shape, becomes a HookError whose
// hook point is the function's name.
//
// Lua API calls that allocate can raise; outside a protected call that
// would abort the process, so arguments are built under lua_cpcall
// (build_protected) and results are read only with calls that never
// allocate.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "meshrun/hooks/hooks.hpp"

struct lua_State;

namespace meshrun::hooks_detail {

// The largest |reward| a hook may give (reward hooks, environment steps):
// finite but huge (1e308) overflows the running mean and variance the run
// normalises with (inf, then nan) without a word; far beyond any reward
// scale, refused like inf.
inline constexpr double kMaxRewardMagnitude = 1e30;

// Restores the stack height it found, however the scope is left.
class StackRestorer {
 public:
  explicit StackRestorer(lua_State* state);
  ~StackRestorer();
  StackRestorer(const StackRestorer&) = delete;
  StackRestorer& operator=(const StackRestorer&) = delete;

 private:
  lua_State* state_;
  int top_;
};

// A registry reference, released when it goes away.
class RegistryValue {
 public:
  RegistryValue(lua_State* state, int reference) : state_(state), reference_(reference) {}
  ~RegistryValue();
  RegistryValue(const RegistryValue&) = delete;
  RegistryValue& operator=(const RegistryValue&) = delete;
  void push() const;

 private:
  lua_State* state_;
  int reference_;
};

// Runs build(state, context) under lua_cpcall; it must leave exactly one new
// value on the stack, which is kept in the registry. A failure (out of
// memory, or an error the trusted code raised) is a HookError.
using BuildFunction = void (*)(lua_State* state, const void* context);
int build_protected(const HookScript& script, std::string_view hook_point, BuildFunction build,
                    const void* context);

// Pushes the script's function `name`, or throws a HookError saying the
// script does not define it. Returns the line of its definition when it is
// in the script itself, else 0: results of the wrong shape are reported
// there.
int push_hook_function(const HookScript& script, std::string_view name);

// Calls the function below `nargs` arguments, leaving its first result (nil
// when none). Throws a HookError located at the failing line of the script.
void call_hook(const HookScript& script, std::string_view hook_point, int nargs);

// A result that breaks the hook point's contract.
[[noreturn]] void throw_bad_result(const HookScript& script, std::string_view hook_point, int line,
                                   std::string message);

// How many entries the table at `index` holds, all keys counted (a raw
// traversal: no metamethod runs, nothing allocates). A result table of one
// entry per sample is checked with it before its entries are read.
int64_t count_entries(lua_State* state, int index);

// "a string", "nil", "a boolean": how messages name the type of a value.
std::string describe_type(lua_State* state, int index);

}  // namespace meshrun::hooks_detail
