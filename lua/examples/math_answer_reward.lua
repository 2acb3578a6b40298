-- A verifiable reward for math prompts: 1 when the last number in the
-- response equals the prompt's label, else 0.
--
-- The label is each data line's value under [data] label_key, e.g.
--   {"prompt": "What is 6 x 7?", "answer": 42}    with label_key = "answer"
-- (a number, or a string such as "42" or "3.5"). Copy this file next to
-- the recipe and set [hooks] script = "math_answer_reward.lua".
local M = {}

-- The last number written in `text` ("-3", "2.50", "1,000" reads as 1000),
-- or nil.
local function last_number(text)
  local found
  for number in text:gmatch("%-?[%d,]*%.?%d+") do found = number end
  if found == nil then return nil end
  return tonumber((found:gsub(",", "")))
end

function M.reward(batch)
  local rewards = {}
  for i = 1, batch.size do
    local expected = tonumber(batch:label(i))
    local got = last_number(batch:response_text(i))
    rewards[i] = (expected ~= nil and got ~= nil and math.abs(got - expected) < 1e-9) and 1 or 0
  end
  return rewards
end

return M
