-- on_step hooks.

-- Extra metrics from the step's own: numbers and booleans.
function derived(step, metrics)
  return {
    loss_x2 = metrics.loss * 2,
    step_seen = step,
    improving = metrics.loss < 1,
    diverged = metrics.loss > 10,
    count = (function() local n = 0 for _ in pairs(metrics) do n = n + 1 end return n end)(),
  }
end

function nothing() end
function empty() return {} end
function number_key() return {1.5} end
function nan_metric() return {ok = 1, bad = 0 / 0} end
function inf_metric() return {big = 1 / 0} end
function string_metric() return {name = "x"} end
function returns_number() return 3 end

function runtime_error(step, metrics)
  local total = 0
  total = total + metrics.missing
  return {total = total}
end
function many_metrics() local out = {} for i = 1, 257 do out["m" .. i] = i end return out end
