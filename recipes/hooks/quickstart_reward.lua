-- Reward for the quickstart's synthetic task: the share of "a" in each
-- response. meshrun calls reward(batch) once per scoring micro-batch and
-- expects one number per sample.
local M = {}

function M.reward(batch)
  local rewards = {}
  for i = 1, batch.size do
    local text = batch:response_text(i)
    local _, count = text:gsub("a", "")
    rewards[i] = count / math.max(1, #text)
  end
  return rewards
end

return M
