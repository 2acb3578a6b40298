// The sandbox's pattern functions against LuaJIT's own: generated patterns,
// subjects and replacements must give the same results and the same errors.
#include <doctest/doctest.h>

#include <lua.hpp>
#include <string>

#include "src/hooks/bounded_patterns.hpp"

namespace {

// Runs in a plain state where `bounded` holds the functions under test and
// `string` LuaJIT's. Returns nil, or the first disagreement.
constexpr const char* kComparison = R"lua(
local bounded, cases = ...
local pattern_pieces = {
  'a', 'b', 'c', '.', '%a', '%d', '%s', '%w', '%p', '%A', '%S', '%z', '%.', '%%', '%(', 'x',
  '[ab]', '[^a]', '[a-c]', '[%d ]', '[]]', '[^]a]', '[a-]', '%b()', '%bab', '%f[%w]', '%f[%W]',
  '(', ')', '()', '%1', '%2', '^', '$', '*', '+', '-', '?', '%', '[', '%f', '%b', '%g', '%x',
}
local subject_bytes = {'a', 'a', 'b', 'b', 'c', '(', ')', '1', '2', ' ', '.', 'x', '%', '\0'}

local function pattern()
  local parts = {}
  for i = 1, math.random(0, 6) do parts[i] = pattern_pieces[math.random(#pattern_pieces)] end
  return table.concat(parts)
end

local function subject()
  local parts = {}
  for i = 1, math.random(0, 14) do parts[i] = subject_bytes[math.random(#subject_bytes)] end
  return table.concat(parts)
end

local function pack(ok, ...)
  return {ok = ok, n = select('#', ...), ...}
end

local function show(result)
  local parts = {tostring(result.ok)}
  for i = 1, result.n do parts[#parts + 1] = type(result[i]) .. ':' .. tostring(result[i]) end
  return table.concat(parts, ' ')
end

local function same(a, b)
  if a.ok ~= b.ok or a.n ~= b.n then return false end
  for i = 1, a.n do
    if a[i] ~= b[i] then return false end
  end
  return true
end

local function gather(iterator)
  local results = {}
  for i = 1, 64 do
    local values = pack(true, iterator())
    if values[1] == nil then break end
    results[#results + 1] = show(values)
  end
  return table.concat(results, '|')
end

local replacements = {
  function() return '<%0>' end,
  function() return '%1-%0' end,
  function() return '%%' end,
  function() return '%2' end,
  function() return '%' end,
  function() return 7 end,
  function() return function(a, b) if a == 'a' then return nil end return tostring(a) .. tostring(b) end end,
  function() return {a = 'A', b = false, ['1'] = 1} end,
  function() return function(a) if a == 'b' then return {} end end end,
  function() return true end,
}

for case = 1, cases do
  local s, p = subject(), pattern()
  local init = math.random(-16, 18)
  local replacement = replacements[math.random(#replacements)]()
  local limit = math.random(-1, 4)
  local calls = {
    {'find', s, p},
    {'find', s, p, init},
    {'find', s, p, init, true},
    {'match', s, p},
    {'match', s, p, init},
    {'gsub', s, p, replacement},
    {'gsub', s, p, replacement, limit},
  }
  for _, call in ipairs(calls) do
    local name = call[1]
    local mine = pack(pcall(bounded[name], unpack(call, 2, 5)))
    local theirs = pack(pcall(string[name], unpack(call, 2, 5)))
    if not same(mine, theirs) then
      return string.format('%s(%q, %q, %s, %s): bounded %s, LuaJIT %s', name, s, p,
                           tostring(call[4]), tostring(call[5]), show(mine), show(theirs))
    end
  end
  local ok_mine, iterator_mine = pcall(bounded.gmatch, s, p)
  local ok_theirs, iterator_theirs = pcall(string.gmatch, s, p)
  if ok_mine ~= ok_theirs then return 'gmatch creation differs for ' .. p end
  if ok_mine then
    local mine = pack(pcall(gather, iterator_mine))
    local theirs = pack(pcall(gather, iterator_theirs))
    if not same(mine, theirs) then
      return string.format('gmatch(%q, %q): bounded %s, LuaJIT %s', s, p, show(mine), show(theirs))
    end
  end
end
return nil
)lua";

}  // namespace

TEST_CASE("the bounded pattern functions agree with LuaJIT's") {
  lua_State* state = luaL_newstate();
  REQUIRE(state != nullptr);
  luaL_openlibs(state);
  lua_newtable(state);
  meshrun::hooks_detail::add_bounded_patterns(state, lua_gettop(state));
  lua_setglobal(state, "bounded");
  lua_getglobal(state, "math");
  lua_getfield(state, -1, "randomseed");
  lua_pushinteger(state, 20261126);
  lua_call(state, 1, 0);
  lua_pop(state, 1);

  REQUIRE(luaL_loadstring(state, kComparison) == 0);
  lua_getglobal(state, "bounded");
  lua_pushinteger(state, 20000);
  const int status = lua_pcall(state, 2, 1, 0);
  const char* result = lua_tostring(state, -1);
  CHECK_MESSAGE(status == 0, (result ? result : "?"));
  CHECK_MESSAGE(lua_isnil(state, -1), (result ? result : "?"));
  lua_close(state);
}

TEST_CASE("a pattern nested past LuaJIT's depth is refused, not a stack overflow") {
  lua_State* state = luaL_newstate();
  luaL_openlibs(state);
  lua_newtable(state);
  meshrun::hooks_detail::add_bounded_patterns(state, lua_gettop(state));
  lua_setglobal(state, "bounded");
  REQUIRE(luaL_loadstring(state,
                          "return select(2, pcall(bounded.find, string.rep('a', 100000), "
                          "string.rep('a?', 100000)))") == 0);
  REQUIRE(lua_pcall(state, 0, 1, 0) == 0);
  CHECK(std::string(lua_tostring(state, -1)) == "pattern too complex");
  lua_close(state);
}
