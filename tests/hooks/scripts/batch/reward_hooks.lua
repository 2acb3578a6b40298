-- Reward hooks over SyntheticBatch (tests/hooks/hook_batch_test_support.hpp).

-- Every element type through every kind of access.
function from_views(batch)
  local rewards = {}
  for i = 1, batch.size do
    local ids = batch.response_ids[i]
    local masked = 0
    for j = 1, #batch.response_mask[i] do
      if batch.response_mask[i][j] then masked = masked + 1 end
    end
    rewards[i] = batch.response_len[i] * 1000 -- int32, 1-D
      + masked * 100                           -- uint8, 2-D rows
      + batch.scores[i]                         -- float32
      + batch.values:get(i)                     -- float64, get
      + (ids[2] - 1000000000000)                -- int64 through a row view: 100 i + 2
      + batch.prompt_ids:get(i, 3) / 1000       -- int32, 2-D get: 10 i + 3
  end
  return rewards
end

-- Shapes and fields.
function shapes(batch)
  local ids = batch.response_ids
  return {batch.size, #batch, ids.rows, ids.cols, #ids, #ids[1], #batch.scores,
          batch.step + batch.n_samples_per_prompt, batch.missing == nil and 1 or 0}
end

-- int64 elements are plain numbers: usable as table keys and in arithmetic.
function int64_as_keys(batch)
  local seen = {}
  seen[batch.response_ids[1][1]] = true
  local rewards = {}
  for i = 1, batch.size do
    local first = batch.response_ids:get(i, 1)
    rewards[i] = (seen[first] and 1 or 0) + (type(first) == "number" and 10 or 0)
  end
  return rewards
end

-- Texts, asked more than once; the decoder runs once per sample.
function text_lengths(batch)
  local rewards = {}
  for i = 1, batch.size do
    local response = batch:response_text(i)
    assert(batch:response_text(i) == response)
    rewards[i] = #response + #batch:prompt_text(i) / 100
  end
  return rewards
end

-- Copies on request.
function copies(batch)
  local ids = batch.prompt_ids:totable()
  local row = batch.response_mask[2]:totable()
  local len = batch.response_len:totable()
  assert(type(ids) == "table" and #ids == 4 and #ids[1] == 3)
  return {ids[4][1], (row[6] and 1 or 0) + (row[7] and 10 or 0), len[3], #row}
end

-- The views alias the caller's memory: the response decoder of the test
-- changes response_len[1] in C++, and the view sees it.
function aliasing(batch)
  local before = batch.response_len[1]
  batch:response_text(1)
  return {before, batch.response_len[1], 0, 0}
end

-- Internals stay out of reach of the script.
function opaque(batch)
  local ids = batch.response_ids
  assert(type(ids) == "userdata" and type(batch) == "userdata")
  assert(getmetatable(ids) == "meshrun batch view", tostring(getmetatable(ids)))
  assert(getmetatable(batch) == "meshrun batch")
  assert(getmetatable(ids[1]) == "meshrun batch view")
  assert(not pcall(rawget, ids, "pointer"))
  assert(not pcall(setmetatable, ids, {}))
  assert(ids.pointer == nil and ids.element == nil and batch.arrays == nil)
  assert(ids.name == "response_ids" and batch.scores.name == "scores")
  assert(tostring(ids) == "int64 view response_ids[4][16]", tostring(ids))
  assert(tostring(batch.scores) == "float32 view scores[4]", tostring(batch.scores))
  assert(tostring(batch) == "batch of 4 samples")
  -- The runtime keeps its own string functions.
  string.format = nil
  local ok, message = pcall(function() return ids[9] end)
  assert(not ok and message:find("response_ids%[9%]: row 9 out of 1..4"), message)
  return {0, 0, 0, 0}
end

-- Results of the wrong shape.
function three_values() return {1, 2, 3} end
function five_values() return {1, 2, 3, 4, 5} end
function returns_nothing() end
function returns_number() return 4 end
function string_value() return {1, "2", 3, 4} end
function nan_value() return {1, 0 / 0, 3, 4} end
function inf_value() return {1, 2, -1 / 0, 4} end
function hole() return {1, 2, nil, 4, x = 5} end

local function failing_helper(batch)
  return batch.scores[1] + nil_value.field
end

function runtime_error(batch)
  return {failing_helper(batch), 0, 0, 0}
end

-- Kept for after the call (tests of use after return).
function keep_views(batch)
  kept_batch = batch
  kept_view = batch.response_ids
  kept_row = batch.response_ids[1]
  kept_vector = batch.scores
  return {0, 0, 0, 0}
end
function huge_value() return {1, -1e308, 2, 4} end
