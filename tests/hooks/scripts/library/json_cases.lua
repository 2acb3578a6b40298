-- meshrun.json: what encode gives, checked when the script loads.
local json = require "meshrun.json"

local function encodes(value, expected)
  local got = json.encode(value)
  if got ~= expected then error(string.format("encoded %s, expected %s", got, expected), 2) end
end

local function refuses(value, expected_message)
  local ok, message = pcall(json.encode, value)
  if ok or message ~= expected_message then
    error(string.format("expected the error %q, got %s", expected_message, tostring(message)), 2)
  end
end

encodes(nil, "null")
encodes(true, "true")
encodes(false, "false")
encodes(3, "3")
encodes(-17, "-17")
encodes(2 ^ 52, "4503599627370496")
encodes(0.1, "0.1")
encodes(1 / 3, "0.3333333333333333")
encodes(1e300, "1e+300")
encodes(0 / 0, "null")
encodes(1 / 0, "null")
encodes("plain", '"plain"')
encodes('quote " backslash \\ slash /', '"quote \\" backslash \\\\ slash /"')
encodes("tab\tnewline\ncr\rbell\7del\127", '"tab\\tnewline\\ncr\\rbell\\u0007del\\u007f"')
encodes("h\195\169", '"h\195\169"')  -- UTF-8 passes through
encodes({1, 2, "three"}, '[1,2,"three"]')
encodes({b = 1, a = {true, false}, c = {}}, '{"a":[true,false],"b":1,"c":{}}')
encodes(json.array(), "[]")
encodes(json.array({4}), "[4]")
encodes({step = 3, metrics = {loss = 0.25}}, '{"metrics":{"loss":0.25},"step":3}')

local loop = {}
loop.self = loop
refuses(loop, "json: cannot encode a table that contains itself")
local holes = "an array's keys must be exactly 1..n (a nil inside a list leaves a hole) and an object's strings"
refuses({1, 2, x = 3}, "json: cannot encode a table with the number key 1: " .. holes)
refuses({[2] = "b"}, "json: cannot encode a table with the number key 2: " .. holes)
refuses({1, nil, 3}, "json: cannot encode a table with the number key 1: " .. holes)
refuses({[true] = 1}, "json: cannot encode a table with the key true (keys must be strings, or 1..n for an array)")
-- Deep nesting is an error naming the bound, not a stack overflow in the module.
local deep = {}
for _ = 1, 10000 do deep = {deep} end
refuses(deep, "json: cannot encode tables nested deeper than 200 levels")
local fine = {}
for _ = 1, 199 do fine = {fine} end
encodes(fine, string.rep("[", 199) .. "{}" .. string.rep("]", 199))
refuses(print, "json: cannot encode a function")

-- The same table twice (not a loop) is fine.
local shared = {1}
encodes({shared, shared}, "[[1],[1]]")
