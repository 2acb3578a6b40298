-- meshrun.json: a small JSON encoder for hook scripts (logs, debugging).
--
--   local json = require "meshrun.json"
--   json.encode({step = 3, loss = 0.25, tags = {"a", "b"}})
--     --> {"loss":0.25,"step":3,"tags":["a","b"]}
--
-- Numbers: integers as integers, others with the shortest text that reads
-- back to the same double; nan and +-inf, which JSON cannot express, become
-- null. Strings are escaped as JSON requires (quote, backslash, control
-- characters); their bytes are otherwise kept, so UTF-8 passes through.
-- Tables: keys exactly 1..n make an array, string keys an object (keys
-- sorted, so output is stable); anything else is an error, as is a table
-- that contains itself. An empty table is {} unless marked with
-- json.array(t). Batch views are userdata: encode v:totable().

local format, gsub, byte = string.format, string.gsub, string.byte
local concat, sort = table.concat, table.sort
local floor, huge = math.floor, math.huge
local pairs, ipairs, type, tostring, tonumber, getmetatable, setmetatable, error =
  pairs, ipairs, type, tostring, tonumber, getmetatable, setmetatable, error

local M = {}

local array_marker = {}

-- Marks `t` (default: a new table) to be encoded as an array even when empty.
function M.array(t)
  return setmetatable(t or {}, array_marker)
end

local escapes = {
  ['"'] = '\\"', ["\\"] = "\\\\", ["\b"] = "\\b", ["\f"] = "\\f",
  ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
}

local function escape(character)
  return escapes[character] or format("\\u%04x", byte(character))
end

local function encode_string(text)
  return '"' .. gsub(text, '[%c"\\]', escape) .. '"'
end

local function encode_number(x)
  if x ~= x or x == huge or x == -huge then return "null" end
  if x == floor(x) and x > -2 ^ 53 and x < 2 ^ 53 then return format("%d", x) end
  for digits = 15, 16 do
    local text = format("%." .. digits .. "g", x)
    if tonumber(text) == x then return text end
  end
  return format("%.17g", x)
end

local encode_value

-- The keys of `t` if they are exactly 1..n (n > 0), else nil.
local function array_length(t)
  local count = 0
  for _ in pairs(t) do count = count + 1 end
  for i = 1, count do
    if t[i] == nil then return nil end
  end
  return count
end

local function encode_table(t, parts, open)
  if open[t] then error("json: cannot encode a table that contains itself", 0) end
  open[t] = true
  local length = array_length(t)
  if length ~= nil and (length > 0 or getmetatable(t) == array_marker) then
    parts[#parts + 1] = "["
    for i = 1, length do
      if i > 1 then parts[#parts + 1] = "," end
      encode_value(t[i], parts, open)
    end
    parts[#parts + 1] = "]"
  else
    local names = {}
    for key in pairs(t) do
      if type(key) ~= "string" then
        error(format("json: cannot encode a table with the key %s (keys must be strings, or 1..n "
                     .. "for an array)", tostring(key)), 0)
      end
      names[#names + 1] = key
    end
    sort(names)
    parts[#parts + 1] = "{"
    for i, name in ipairs(names) do
      if i > 1 then parts[#parts + 1] = "," end
      parts[#parts + 1] = encode_string(name)
      parts[#parts + 1] = ":"
      encode_value(t[name], parts, open)
    end
    parts[#parts + 1] = "}"
  end
  open[t] = nil
end

encode_value = function(value, parts, open)
  local kind = type(value)
  if kind == "nil" then
    parts[#parts + 1] = "null"
  elseif kind == "boolean" then
    parts[#parts + 1] = value and "true" or "false"
  elseif kind == "number" then
    parts[#parts + 1] = encode_number(value)
  elseif kind == "string" then
    parts[#parts + 1] = encode_string(value)
  elseif kind == "table" then
    encode_table(value, parts, open)
  elseif kind == "userdata" then
    error("json: cannot encode a userdata (for a batch view, encode v:totable())", 0)
  else
    error("json: cannot encode a " .. kind, 0)
  end
end

-- Returns the JSON text of `value`.
function M.encode(value)
  local parts = {}
  encode_value(value, parts, {})
  return concat(parts)
end

return M
