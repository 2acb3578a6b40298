-- Reads files and a module of its own folder through the sandbox.
local helpers = require("lib.helpers")
assert(require("lib.helpers") == helpers, "require should cache modules")

local file = assert(io.open("data.txt"))
local first = file:read("*l")
file:close()
assert(first == "alpha", first)

local lines = {}
for line in io.lines("data.txt") do
  lines[#lines + 1] = line
end
assert(#lines == 2, #lines)

local chunk = assert(loadfile("lib/helpers.lua"))
assert(chunk().double(2) == 4)
assert(dofile("lib/helpers.lua").double(3) == 6)
assert(load("return 1 + 1")() == 2)
assert(loadstring("return string")() == string, "loaded chunks see the sandbox globals")

function reward()
  return helpers.double(#lines)
end
