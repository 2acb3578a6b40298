-- meshrun.reward over SyntheticBatch (tests/hooks/hook_batch_test_support.hpp).
-- No helper is tail-called (`return f(x)`): LuaJIT drops the caller's frame
-- then, and the tests check the script lines that errors name.
local rewards = require "meshrun.reward"

function lengths(batch)
  local result = rewards.response_lengths(batch)
  return result
end

-- Response length in characters plus a clamped score, per sample.
function per_sample(batch)
  local result = rewards.per_sample(batch, function(response, i)
    return #response + rewards.clamp(batch.scores[i], 0, 1)
  end)
  return result
end

function bad_score(batch)
  local result = rewards.per_sample(batch, function(_, i)
    if i == 3 then return "high" end
    return 0
  end)
  return result
end

function group_means(batch)
  local result = rewards.group_means({1, 3, 10, 20}, batch.n_samples_per_prompt)
  return result
end

function uneven_groups(batch)
  local result = rewards.group_means({1, 2, 3, 4}, 3)
  return result
end
