// Internal to the hooks subsystem: Lua sources compiled into the binary by
// embed_lua.py at build time (see src/hooks/meson.build), so nothing depends
// on where, or whether, the Lua files are installed.
#pragma once

#include <span>
#include <string_view>

namespace meshrun::hooks_detail {

struct EmbeddedLua {
  std::string_view module;  // "meshrun.json"
  std::string_view origin;  // "lua/meshrun/json.lua": the chunk name in messages
  std::string_view source;
};

// lua/meshrun/*.lua: what scripts can require as "meshrun.<name>".
std::span<const EmbeddedLua> library_modules();

// src/hooks/batch_runtime.lua alone: the trusted code behind batch objects.
std::span<const EmbeddedLua> batch_runtime_sources();

}  // namespace meshrun::hooks_detail
