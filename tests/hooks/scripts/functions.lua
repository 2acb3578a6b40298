-- Hook functions as globals, next to things that are not hooks.
local function double(x)
  return x * 2
end

function reward(sample)
  return double(sample.score)
end

function on_step(step)
  return step
end

threshold = 0.5
