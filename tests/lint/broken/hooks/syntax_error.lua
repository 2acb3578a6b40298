-- Does not compile: the function is never closed.
function reward(batch)
  local rewards = {}
  for i = 1, batch.size do
    rewards[i] = 1
  end
  return rewards
