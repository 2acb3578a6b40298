-- on_rollout hooks over SyntheticBatch (tests/hooks/hook_batch_test_support.hpp).

-- Truncates every response to at most 4 tokens, in place: the ids past the
-- end become 0, the mask false, the length 4; drops sample 2.
function truncate(batch)
  local ids, mask, lengths = batch.response_ids, batch.response_mask, batch.response_len
  for i = 1, batch.size do
    if lengths[i] > 4 then
      for j = 5, ids.cols do
        ids[i][j] = 0
        mask:set(i, j, false)
      end
      lengths[i] = 4
    end
  end
  ids:set(1, 1, 2 ^ 40)
  batch:drop(2)
end

-- Keep flags returned, and a drop on top of them.
function keep_flags(batch)
  batch:drop(4)
  batch:drop(4)  -- twice is once
  return {true, false, true, true}
end

function keep_all() return {true, true, true, true} end
function three_flags() return {true, true, true} end
function number_flag() return {true, 1, true, true} end
function returns_string() return "keep" end
