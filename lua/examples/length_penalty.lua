-- Example hook: a length penalty, for shaping the reward.
--
-- reward(batch) returns, for each sample, -PENALTY_PER_TOKEN for every
-- response token beyond TARGET_TOKENS (0 within the target), never below
-- -MAX_PENALTY. Lengths come from batch.response_len or, without it, from
-- batch.response_mask (meshrun.reward.response_lengths).
--
-- Use it from a recipe: copy this file next to the recipe (paths are
-- relative to it; a sandboxed script reads files only in its own folder),
-- then
--
--   [hooks]
--   script = "length_penalty.lua"
--   reward = "reward"        # the default; the function below
--
-- Next to a reward model in [roles.reward] the hook's value shapes the
-- model's reward; with `hook = "reward"` in [roles.reward] it is the whole
-- reward. Edit the three numbers to taste.

local rewards = require "meshrun.reward"

local TARGET_TOKENS = 256
local PENALTY_PER_TOKEN = 0.01
local MAX_PENALTY = 1.0

function reward(batch)
  local lengths = rewards.response_lengths(batch)
  local penalties = {}
  for i = 1, batch.size do
    local excess = math.max(0, lengths[i] - TARGET_TOKENS)
    penalties[i] = -rewards.clamp(excess * PENALTY_PER_TOKEN, 0, MAX_PENALTY)
  end
  return penalties
end
