-- A calculator tool for multi-turn episodes ([env] script): the model may
-- call the tool Qwen-style,
--   <tool_call>{"name": "calculator", "arguments": {"expression": "6 * (3 + 4)"}}</tool_call>
-- and reads the result as the next observation (rendered as a "tool"
-- message with a chat template, [env] observation_role); a reply without a
-- tool call is its final answer, rewarded 1 when its last number equals the
-- prompt's label ([data] label_key), else 0. Every tool call costs 0.05, so
-- the policy learns to call the tool when it helps. Copy this file next to
-- the recipe and set [env] script = "calculator_env.lua".
local json = require "meshrun.json"

local env = {}

local kMaxExpression = 200  -- characters; longer expressions are refused

-- Arithmetic over + - * / and parentheses on decimal numbers, by recursive
-- descent (never load(): the expression is the model's text). Returns the
-- value, or nil and what is wrong.
local function evaluate(text)
  if type(text) ~= "string" then return nil, "the expression is not a string" end
  if #text > kMaxExpression then return nil, "the expression is longer than " .. kMaxExpression .. " characters" end
  local position = 1
  local function skip() position = text:find("%S", position) or #text + 1 end
  local expression
  local function primary()
    skip()
    local c = text:sub(position, position)
    if c == "(" then
      position = position + 1
      local value = expression()
      skip()
      if text:sub(position, position) ~= ")" then error("a ( without its )", 0) end
      position = position + 1
      return value
    elseif c == "-" then
      position = position + 1
      return -primary()
    end
    local number = text:match("^%d*%.?%d+", position)
    if not number then error("a number was expected at character " .. position, 0) end
    position = position + #number
    return tonumber(number)
  end
  local function term()
    local value = primary()
    while true do
      skip()
      local c = text:sub(position, position)
      if c ~= "*" and c ~= "/" then return value end
      position = position + 1
      local right = primary()
      if c == "*" then value = value * right
      elseif right == 0 then error("division by zero", 0)
      else value = value / right end
    end
  end
  expression = function()
    local value = term()
    while true do
      skip()
      local c = text:sub(position, position)
      if c ~= "+" and c ~= "-" then return value end
      position = position + 1
      local right = term()
      value = c == "+" and value + right or value - right
    end
  end
  local ok, value = pcall(function()
    local value = expression()
    skip()
    if position <= #text then error("unexpected " .. text:sub(position, position), 0) end
    return value
  end)
  if not ok then return nil, value end
  return value
end

local function last_number(text)
  local found
  for number in text:gmatch("%-?%d*%.?%d+") do found = number end
  return found and tonumber(found)
end

function env.reset(ctx)
  return {calls = 0}
end

function env.step(state, reply, ctx)
  local call = reply:match("<tool_call>%s*(.-)%s*</tool_call>")
  if call == nil then
    local expected = tonumber(ctx.label)
    local answer = last_number(reply)
    local right = expected ~= nil and answer ~= nil and math.abs(answer - expected) < 1e-9
    return {reward = right and 1 or 0, done = true}
  end
  state.calls = state.calls + 1
  local ok, request = pcall(json.decode, call)
  if not ok or type(request) ~= "table" then
    return {observation = "error: the tool call is not a JSON object", reward = -0.05}
  end
  if request.name ~= "calculator" then
    return {observation = "error: unknown tool " .. tostring(request.name) .. "; the tool is calculator",
            reward = -0.05}
  end
  local arguments = type(request.arguments) == "table" and request.arguments or {}
  local value, problem = evaluate(arguments.expression)
  if value == nil then return {observation = "error: " .. problem, reward = -0.05} end
  return {observation = json.encode({result = value}), reward = -0.05}
end

return env
