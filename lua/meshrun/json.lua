-- meshrun.json: a small JSON encoder and decoder for hook scripts (logs,
-- debugging, answers a reward reads from a response).
--
--   local json = require "meshrun.json"
--   json.encode({step = 3, loss = 0.25, tags = {"a", "b"}})
--     --> {"loss":0.25,"step":3,"tags":["a","b"]}
--   json.decode('{"answer": [1, 2]}').answer[2]  --> 2
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

-- Nesting bound: deeper tables are an error naming it, not a Lua stack
-- overflow inside this module (as decoding's MAX_DEPTH below).
local ENCODE_MAX_DEPTH = 200

local function encode_table(t, parts, open, depth)
  if open[t] then error("json: cannot encode a table that contains itself", 0) end
  if depth > ENCODE_MAX_DEPTH then
    error(format("json: cannot encode tables nested deeper than %d levels", ENCODE_MAX_DEPTH), 0)
  end
  open[t] = true
  local length = array_length(t)
  if length ~= nil and (length > 0 or getmetatable(t) == array_marker) then
    parts[#parts + 1] = "["
    for i = 1, length do
      if i > 1 then parts[#parts + 1] = "," end
      encode_value(t[i], parts, open, depth)
    end
    parts[#parts + 1] = "]"
  else
    local names = {}
    for key in pairs(t) do
      if type(key) == "number" then
        error(format("json: cannot encode a table with the number key %s: an array's keys must be exactly "
                     .. "1..n (a nil inside a list leaves a hole) and an object's "
                     .. "strings", tostring(key)), 0)
      elseif type(key) ~= "string" then
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
      encode_value(t[name], parts, open, depth)
    end
    parts[#parts + 1] = "}"
  end
  open[t] = nil
end

encode_value = function(value, parts, open, depth)
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
    encode_table(value, parts, open, depth + 1)
  elseif kind == "userdata" then
    error("json: cannot encode a userdata (for a batch view, encode v:totable())", 0)
  else
    error("json: cannot encode a " .. kind, 0)
  end
end

-- Returns the JSON text of `value`.
function M.encode(value)
  local parts = {}
  encode_value(value, parts, {}, 0)
  return concat(parts)
end

------------------------------------------------------------------------------
-- Decoding. Hand-written because no JSON library ships with LuaJIT and hook
-- scripts run sandboxed (no C modules): a recursive descent over the text,
-- one position at a time, nesting bounded by MAX_DEPTH so hostile text can
-- neither overflow the C stack nor loop: every step consumes input.

local sub, find, char = string.sub, string.find, string.char
local MAX_DEPTH = 200

local function decode_error(text, position, message)
  error(format("json.decode: %s at character %d", message, position), 0)
end

local function skip_space(text, position)
  local _, last = find(text, "^[ \n\r\t]*", position)
  return last + 1
end

local function utf8_of(code)
  if code < 0x80 then return char(code) end
  if code < 0x800 then return char(0xC0 + floor(code / 0x40), 0x80 + code % 0x40) end
  if code < 0x10000 then
    return char(0xE0 + floor(code / 0x1000), 0x80 + floor(code / 0x40) % 0x40, 0x80 + code % 0x40)
  end
  return char(0xF0 + floor(code / 0x40000), 0x80 + floor(code / 0x1000) % 0x40,
              0x80 + floor(code / 0x40) % 0x40, 0x80 + code % 0x40)
end

local unescapes = {['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t"}

local function decode_string(text, position)
  local parts = {}
  local i = position + 1
  while true do
    local first, last = find(text, '^[^"\\%c]+', i)
    if first then
      parts[#parts + 1] = sub(text, first, last)
      i = last + 1
    end
    local c = sub(text, i, i)
    if c == '"' then return concat(parts), i + 1 end
    if c == "" then decode_error(text, position, "unterminated string") end
    if c ~= "\\" then decode_error(text, i, "control character in string") end
    local e = sub(text, i + 1, i + 1)
    if e == "u" then
      local hex = sub(text, i + 2, i + 5)
      if not find(hex, "^%x%x%x%x$") then decode_error(text, i, "bad \\u escape") end
      local code = tonumber(hex, 16)
      i = i + 6
      if code >= 0xD800 and code <= 0xDBFF and sub(text, i, i + 1) == "\\u" then
        local low = tonumber(sub(text, i + 2, i + 5), 16)
        if low and low >= 0xDC00 and low <= 0xDFFF then
          code = 0x10000 + (code - 0xD800) * 0x400 + (low - 0xDC00)
          i = i + 6
        end
      end
      parts[#parts + 1] = utf8_of(code)
    else
      local plain = unescapes[e]
      if plain == nil then decode_error(text, i, "bad escape") end
      parts[#parts + 1] = plain
      i = i + 2
    end
  end
end

local decode_value

local function decode_array(text, position, depth)
  local out, count = {}, 0
  local i = skip_space(text, position + 1)
  if sub(text, i, i) == "]" then return M.array(out), i + 1 end
  while true do
    local value
    value, i = decode_value(text, i, depth + 1)
    count = count + 1
    out[count] = value
    i = skip_space(text, i)
    local c = sub(text, i, i)
    if c == "]" then return out, i + 1 end
    if c ~= "," then decode_error(text, i, "expected ',' or ']' in array") end
    i = skip_space(text, i + 1)
  end
end

local function decode_object(text, position, depth)
  local out = {}
  local i = skip_space(text, position + 1)
  if sub(text, i, i) == "}" then return out, i + 1 end
  while true do
    if sub(text, i, i) ~= '"' then decode_error(text, i, "expected a string key") end
    local key
    key, i = decode_string(text, i)
    i = skip_space(text, i)
    if sub(text, i, i) ~= ":" then decode_error(text, i, "expected ':' after a key") end
    local value
    value, i = decode_value(text, skip_space(text, i + 1), depth + 1)
    out[key] = value
    i = skip_space(text, i)
    local c = sub(text, i, i)
    if c == "}" then return out, i + 1 end
    if c ~= "," then decode_error(text, i, "expected ',' or '}' in object") end
    i = skip_space(text, i + 1)
  end
end

local literals = {["true"] = true, ["false"] = false}

decode_value = function(text, position, depth)
  if depth > MAX_DEPTH then decode_error(text, position, "nesting deeper than " .. MAX_DEPTH .. " levels") end
  local c = sub(text, position, position)
  if c == "{" then return decode_object(text, position, depth) end
  if c == "[" then return decode_array(text, position, depth) end
  if c == '"' then return decode_string(text, position) end
  local first, last = find(text, "^-?%d+%.?%d*[eE]?[-+]?%d*", position)
  if first then
    local number = tonumber(sub(text, first, last))
    if number == nil then decode_error(text, position, "bad number") end
    return number, last + 1
  end
  for word, value in pairs(literals) do
    if sub(text, position, position + #word - 1) == word then return value, position + #word end
  end
  if sub(text, position, position + 3) == "null" then return nil, position + 4 end
  decode_error(text, position, c == "" and "unexpected end of text" or "unexpected '" .. c .. "'")
end

-- The Lua value of JSON `text`: objects and arrays as tables (arrays
-- 1-based, marked as arrays so they encode back as []), strings, numbers,
-- booleans; null as nil (so a null in an array leaves a hole). Malformed
-- text is an error naming the character where it went wrong.
function M.decode(text)
  if type(text) ~= "string" then error("json.decode: expected a string, got " .. type(text), 0) end
  local value, position = decode_value(text, skip_space(text, 1), 1)
  position = skip_space(text, position)
  if position <= #text then decode_error(text, position, "trailing characters") end
  return value
end

return M
