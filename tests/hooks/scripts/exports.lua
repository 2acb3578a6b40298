-- Hook functions in the returned table; a global function is still found.
function on_rollout(batch)
  return batch
end

function reward()
  return "global"
end

local hooks = {}

function hooks.reward()
  return "exported"
end

hooks.on_step = function() end
hooks.name = "exports"
hooks.on_rollout = "not a function, so the global wins"

return hooks
