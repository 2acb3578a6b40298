-- A verifiable reward for grpo-tiny's synthetic task: each prompt asks for
-- one letter, and its line in the data carries that letter under "answer"
-- ([data] label_key). The reward is the share of the response's characters
-- that are the labelled letter, so the right answer depends on the prompt.
local M = {}

function M.reward(batch)
  local rewards = {}
  for i = 1, batch.size do
    local answer = batch:label(i)
    local text = batch:response_text(i)
    local hits = 0
    for position = 1, #text do
      if text:sub(position, position) == answer then hits = hits + 1 end
    end
    rewards[i] = hits / math.max(1, #text)
  end
  return rewards
end

return M
