// Internal to the hooks subsystem: what a loaded script leaves in its
// state's registry, and how hook functions are found there. The registry
// holds the environment the script's functions see (the sandbox table, or
// the real globals without a sandbox), a snapshot of the functions that
// environment held before the script ran (built-ins, never hooks), and the
// table the main chunk returned, if any. The batch bindings reuse
// push_script_function to fetch a hook before calling it. The C++ side keeps
// its own slots there too, keyed by the address of a static, read back with
// registry_pointer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

struct lua_State;

namespace meshrun::hooks_detail {

// Records the environment on top of the stack (left there) and snapshots its
// functions as built-ins. Must run protected.
void record_environment(lua_State* state);

// Keeps the value on top of the stack (popped) as the script's exports when
// it is a table.
void record_exports(lua_State* state);

void push_environment(lua_State* state);

// Pushes the hook function `name` and returns true: the exports' field if it
// is a function, else a function global of the script that is not a
// built-in. Pushes nothing and returns false otherwise. Never runs Lua code
// (lookups are raw), so it is safe outside a protected call.
bool push_script_function(lua_State* state, std::string_view name);

// The pointer (light or full userdata) the registry holds under the light
// userdata `key`, or nullptr when the slot holds anything else or nothing.
// A raw lookup that leaves the stack as it was and never allocates, so it is
// safe outside a protected call and inside LuaJIT's panic handler.
void* registry_pointer(lua_State* state, const void* key);

// Every name push_script_function finds, sorted, without duplicates.
std::vector<std::string> script_function_names(lua_State* state);

}  // namespace meshrun::hooks_detail
