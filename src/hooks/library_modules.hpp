// Internal to the hooks subsystem: the meshrun.* Lua library (lua/meshrun/,
// embedded at build time) made available to require. Without a sandbox the
// modules sit in package.preload; the sandbox's require asks
// push_library_module before looking in the script's folder, and runs the
// module in the sandbox like any module of the script's own.
#pragma once

#include <string_view>

struct lua_State;

namespace meshrun::hooks_detail {

// Registers a package.preload loader for each module. Must run protected.
void preload_library_modules(lua_State* state);

// When `name` is a library module, pushes its compiled main chunk with the
// table at `environment_index` as its environment and returns true;
// otherwise pushes nothing and returns false. Raises on a compile error.
bool push_library_module(lua_State* state, std::string_view name, int environment_index);

}  // namespace meshrun::hooks_detail
