-- A runaway reward hook: it reads a view in a loop that never ends.
function reward(batch)
  local sum = 0
  while true do
    sum = sum + batch.scores[1] + batch.response_ids[2][3]
  end
end
