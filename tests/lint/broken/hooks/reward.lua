-- Defines reward only; the recipes that use it may name other functions.
local M = {}

function M.reward(batch)
  local rewards = {}
  for i = 1, batch.size do
    rewards[i] = 0
  end
  return rewards
end

return M
