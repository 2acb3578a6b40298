-- Example hook: a format reward.
--
-- reward(batch) returns 1 for each response that matches PATTERN (a Lua
-- pattern, anchored with ^ and $ to match the whole text), else 0. The
-- default pays for responses of the form "Answer: 42".
--
-- Use it from a recipe: copy this file next to the recipe (paths are
-- relative to it), then
--
--   [hooks]
--   script = "format_reward.lua"
--
-- and either `hook = "reward"` in [roles.reward] (the whole reward) or a
-- reward model there (this hook then shapes its reward).

local rewards = require "meshrun.reward"

local PATTERN = "^Answer: %d+$"

function reward(batch)
  return rewards.per_sample(batch, function(response)
    return response:find(PATTERN) and 1 or 0
  end)
end
