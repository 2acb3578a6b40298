-- meshrun.reward: helpers for reward(batch) hooks.
--
--   local rewards = require "meshrun.reward"
--   function reward(batch)
--     local lengths = rewards.response_lengths(batch)
--     return rewards.per_sample(batch, function(response, i)
--       return rewards.clamp(#response / 100, 0, 1) - 0.001 * lengths[i]
--     end)
--   end
--
-- Lengths are in tokens and come from the batch's arrays, by their
-- conventional names (docs/hooks.md): response_len (1-D, a count per
-- sample) when the batch has it, else response_mask (2-D, true for each
-- response token).

local format, type, error, tostring, huge = string.format, type, error, tostring, math.huge

local M = {}

-- Calls score(response_text, i) for each sample i (the prompt is there as
-- batch:prompt_text(i) when needed) and returns the scores in a table, as
-- reward(batch) must. Each score must be a finite number.
function M.per_sample(batch, score)
  local scores = {}
  for i = 1, batch.size do
    local value = score(batch:response_text(i), i)
    if type(value) ~= "number" or value ~= value or value == huge or value == -huge then
      error(format("meshrun.reward.per_sample: the score of sample %d is %s, expected a finite "
                   .. "number", i, tostring(value)), 2)
    end
    scores[i] = value
  end
  return scores
end

-- x limited to [low, high].
function M.clamp(x, low, high)
  if low > high then
    error(format("meshrun.reward.clamp: low %s is above high %s", tostring(low), tostring(high)), 2)
  end
  if x < low then return low end
  if x > high then return high end
  return x
end

local function is_set(flag)
  return flag == true or (type(flag) == "number" and flag ~= 0)
end

-- The response length of each sample, in tokens, as a table of numbers.
function M.response_lengths(batch)
  local lengths = {}
  local counts = batch.response_len
  if counts ~= nil then
    for i = 1, batch.size do lengths[i] = counts[i] end
    return lengths
  end
  local mask = batch.response_mask
  if mask == nil then
    error("meshrun.reward.response_lengths: the batch has neither response_len nor response_mask", 2)
  end
  for i = 1, batch.size do
    local row, length = mask[i], 0
    for j = 1, #row do
      if is_set(row[j]) then length = length + 1 end
    end
    lengths[i] = length
  end
  return lengths
end

-- The mean of each group of `group_size` consecutive values (the samples of
-- one prompt when group_size is batch.n_samples_per_prompt), repeated for
-- every member: subtract it for a group baseline.
function M.group_means(values, group_size)
  if type(group_size) ~= "number" or group_size < 1 or group_size % 1 ~= 0 then
    error("meshrun.reward.group_means: group_size must be a positive integer", 2)
  end
  if #values % group_size ~= 0 then
    error(format("meshrun.reward.group_means: %d values do not split into groups of %d", #values,
                 group_size), 2)
  end
  local means = {}
  for first = 1, #values, group_size do
    local sum = 0
    for i = first, first + group_size - 1 do sum = sum + values[i] end
    for i = first, first + group_size - 1 do means[i] = sum / group_size end
  end
  return means
end

return M
