// The sandbox's ways to run more code: load/loadstring compile text only and
// give the chunk the sandbox environment; loadfile/dofile read files inside
// the script's folder; require("a.b") runs folder/a/b.lua once, in the same
// sandbox, and returns the sandbox's own tables for library names and the
// embedded meshrun.* modules (also run in the sandbox) for theirs.

#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "instruction_limit.hpp"
#include "library_modules.hpp"
#include "sandbox_internal.hpp"

namespace meshrun::hooks_detail {
namespace {

constexpr char bytecode_signature = '\x1b';

// Compiles the text at `text_index` into a function whose environment is the
// table at `environment_index`; returns load's results (function, or nil and
// the message).
int compile_text(lua_State* state, int text_index, const char* chunk_name, int environment_index) {
  size_t size = 0;
  const char* text = lua_tolstring(state, text_index, &size);
  if (size > 0 && text[0] == bytecode_signature) {
    return raise_sandbox_violation(state, "loading a binary (bytecode) chunk is not allowed");
  }
  if (luaL_loadbufferx(state, text, size, chunk_name, "t") != 0) {
    lua_pushnil(state);
    lua_insert(state, -2);
    return 2;
  }
  lua_pushvalue(state, environment_index);
  lua_setfenv(state, -2);
  return 1;
}

// load(chunk [, chunkname [, mode [, env]]]); upvalue 1: the environment.
int sandbox_load(lua_State* state) {
  const char* mode = luaL_optstring(state, 3, "bt");
  if (std::strchr(mode, 't') == nullptr) {
    return raise_sandbox_violation(state, "loading a binary (bytecode) chunk is not allowed");
  }
  const int environment = lua_isnoneornil(state, 4) ? lua_upvalueindex(1) : 4;
  if (environment == 4) luaL_checktype(state, 4, LUA_TTABLE);
  if (lua_type(state, 1) == LUA_TSTRING) {
    return compile_text(state, 1, luaL_optstring(state, 2, lua_tostring(state, 1)), environment);
  }
  luaL_checktype(state, 1, LUA_TFUNCTION);
  const char* chunk_name = luaL_optstring(state, 2, "=(load)");
  lua_settop(state, 4);
  const NestedCallGuard nested(state, "load");
  // On the Lua heap: a reader that calls load again nests this frame.
  auto& pieces = *static_cast<luaL_Buffer*>(lua_newuserdata(state, sizeof(luaL_Buffer)));
  luaL_buffinit(state, &pieces);
  for (;;) {
    lua_pushvalue(state, 1);
    lua_call(state, 0, 1);
    if (lua_isnil(state, -1)) {
      lua_pop(state, 1);
      break;
    }
    if (lua_type(state, -1) != LUA_TSTRING) {
      return luaL_error(state, "reader function must return a string");
    }
    if (lua_objlen(state, -1) == 0) {
      lua_pop(state, 1);
      break;
    }
    luaL_addvalue(&pieces);
  }
  luaL_pushresult(&pieces);
  return compile_text(state, lua_gettop(state), chunk_name, environment);
}

// loadstring(text [, chunkname]); upvalue 1: the environment.
int sandbox_loadstring(lua_State* state) {
  const char* text = luaL_checkstring(state, 1);
  return compile_text(state, 1, luaL_optstring(state, 2, text), lua_upvalueindex(1));
}

// Pushes the compiled file or returns false with the message pushed.
bool load_confined_file(lua_State* state, const char* path, int environment_index) {
  if (luaL_loadfilex(state, path, "t") != 0) {
    if (std::strcmp(lua_tostring(state, -1), "attempt to load chunk with wrong mode") == 0) {
      raise_sandbox_violation(state, "loading a binary (bytecode) chunk is not allowed");
    }
    return false;
  }
  lua_pushvalue(state, environment_index);
  lua_setfenv(state, -2);
  return true;
}

// loadfile(path); upvalue 1: the environment, upvalue 2: the folder.
int sandbox_loadfile(lua_State* state) {
  size_t length = 0;
  const char* requested = luaL_checklstring(state, 1, &length);
  lua_pushfstring(state, "loadfile('%s')", requested);
  const char* path =
      push_confined_path(state, lua_upvalueindex(2), {requested, length}, lua_tostring(state, -1));
  if (load_confined_file(state, path, lua_upvalueindex(1))) return 1;
  lua_pushnil(state);
  lua_insert(state, -2);
  return 2;
}

// dofile(path); upvalue 1: the environment, upvalue 2: the folder.
int sandbox_dofile(lua_State* state) {
  size_t length = 0;
  const char* requested = luaL_checklstring(state, 1, &length);
  lua_pushfstring(state, "dofile('%s')", requested);
  const char* path =
      push_confined_path(state, lua_upvalueindex(2), {requested, length}, lua_tostring(state, -1));
  if (!load_confined_file(state, path, lua_upvalueindex(1))) return lua_error(state);
  const NestedCallGuard nested(state, "dofile");
  const int base = lua_gettop(state) - 1;
  lua_call(state, 0, LUA_MULTRET);
  return lua_gettop(state) - base;
}

// "a.b" -> "a/b.lua"; empty when the name has anything but dotted parts of
// letters, digits, '_' and '-', so "..", "/" and absolute names never reach
// the file system.
std::string module_relative_path(std::string_view name) {
  std::string path;
  bool part_started = false;
  for (char c : name) {
    if (c == '.') {
      if (!part_started) return {};
      path += '/';
      part_started = false;
    } else if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_' || c == '-') {
      path += c;
      part_started = true;
    } else {
      return {};
    }
  }
  if (!part_started) return {};
  return path + ".lua";
}

bool is_regular_file(const char* path) {
  std::error_code error;
  return std::filesystem::is_regular_file(path, error);
}

// Its address marks a module whose loading has started but not finished.
const char module_loading_marker = 0;

// For sandbox_require: the module `name` is being loaded (a require of it
// from inside is a loop).
void mark_module_loading(lua_State* state, const char* name) {
  lua_pushlightuserdata(state, const_cast<char*>(&module_loading_marker));
  lua_setfield(state, lua_upvalueindex(4), name);
}

// For sandbox_require: runs the module's main chunk (on top) with the name,
// caches and returns what it returned (true for nothing).
int run_module(lua_State* state, const char* name) {
  const NestedCallGuard nested(state, "require");
  lua_pushstring(state, name);
  lua_call(state, 1, 1);
  if (lua_isnil(state, -1)) {
    lua_pop(state, 1);
    lua_pushboolean(state, 1);
  }
  lua_pushvalue(state, -1);
  lua_setfield(state, lua_upvalueindex(4), name);
  return 1;
}

// require(name); upvalues: 1 environment, 2 folder, 3 library tables, 4 loaded modules.
// The meshrun.* library comes before the folder, as package.preload would.
int sandbox_require(lua_State* state) {
  size_t name_length = 0;
  const char* name = luaL_checklstring(state, 1, &name_length);
  lua_settop(state, 1);

  lua_getfield(state, lua_upvalueindex(3), name);
  if (!lua_isnil(state, -1)) return 1;
  lua_pop(state, 1);

  lua_getfield(state, lua_upvalueindex(4), name);
  if (lua_touserdata(state, -1) == &module_loading_marker) {
    return luaL_error(state, "loop or previous error loading module '%s'", name);
  }
  if (!lua_isnil(state, -1)) return 1;
  lua_pop(state, 1);

  if (push_library_module(state, {name, name_length}, lua_upvalueindex(1))) {
    mark_module_loading(state, name);
    return run_module(state, name);
  }

  lua_getfield(state, LUA_REGISTRYINDEX, "_LOADED");
  lua_getfield(state, -1, name);
  if (!lua_isnil(state, -1)) {
    lua_pushfstring(state, "require('%s') is not allowed", name);
    return raise_sandbox_violation(state, lua_tostring(state, -1));
  }
  lua_settop(state, 1);

  bool named_inside = false;
  {
    std::string relative = module_relative_path({name, name_length});
    named_inside = !relative.empty();
    lua_pushstring(state, relative.c_str());
  }
  if (!named_inside) {
    lua_pushfstring(state,
                    "require('%s') does not name a module inside the script folder "
                    "(use dotted names: 'a.b' is <folder>/a/b.lua)",
                    name);
    return raise_sandbox_violation(state, lua_tostring(state, -1));
  }
  lua_pushfstring(state, "require('%s')", name);
  const char* path = push_confined_path(state, lua_upvalueindex(2), lua_tostring(state, 2),
                                        lua_tostring(state, -1));
  if (!is_regular_file(path)) {
    return luaL_error(state, "module '%s' not found: no file '%s'", name, path);
  }

  mark_module_loading(state, name);
  if (!load_confined_file(state, path, lua_upvalueindex(1))) {
    return luaL_error(state, "error loading module '%s' from file '%s':\n\t%s", name, path,
                      lua_tostring(state, -1));
  }
  return run_module(state, name);
}

}  // namespace

void add_chunk_loaders(lua_State* state, int environment_index, int folder_index,
                       int libraries_index) {
  lua_pushvalue(state, environment_index);
  lua_pushcclosure(state, sandbox_load, 1);
  lua_setfield(state, environment_index, "load");

  lua_pushvalue(state, environment_index);
  lua_pushcclosure(state, sandbox_loadstring, 1);
  lua_setfield(state, environment_index, "loadstring");

  lua_pushvalue(state, environment_index);
  lua_pushvalue(state, folder_index);
  lua_pushcclosure(state, sandbox_loadfile, 2);
  lua_setfield(state, environment_index, "loadfile");

  lua_pushvalue(state, environment_index);
  lua_pushvalue(state, folder_index);
  lua_pushcclosure(state, sandbox_dofile, 2);
  lua_setfield(state, environment_index, "dofile");

  lua_pushvalue(state, environment_index);
  lua_pushvalue(state, folder_index);
  lua_pushvalue(state, libraries_index);
  lua_newtable(state);
  lua_pushcclosure(state, sandbox_require, 4);
  lua_setfield(state, environment_index, "require");
}

}  // namespace meshrun::hooks_detail
