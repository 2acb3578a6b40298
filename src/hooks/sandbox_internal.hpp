// Internal to the sandbox: pieces shared by the files that build it
// (sandbox.cpp assembles the environment, sandbox_io.cpp confines io,
// sandbox_chunks.cpp provides text-only load and folder-local require).
#pragma once

#include <lua.hpp>
#include <string_view>

namespace meshrun::hooks_detail {

// Raises "sandbox: WHAT (set [hooks] sandbox = false to lift it)" located at
// the script line that called into the sandbox.
int raise_sandbox_violation(lua_State* state, const char* what);

// Pushes the path to open for `requested`, confined to the folder held by the
// string at `folder_index`; otherwise raises a violation "WHAT <refusal>".
const char* push_confined_path(lua_State* state, int folder_index, std::string_view requested,
                               const char* what);

// Sets the confined io.open and io.lines into the table at `io_index`.
void add_confined_io(lua_State* state, int io_index, int folder_index);

// Sets load, loadstring, loadfile, dofile and require into the environment at
// `environment_index`; require hands out the tables of `libraries_index` for
// the library names ("string", "ffi", ...) before looking in the folder.
void add_chunk_loaders(lua_State* state, int environment_index, int folder_index,
                       int libraries_index);

}  // namespace meshrun::hooks_detail
