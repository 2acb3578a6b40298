-- Example hook: log every training step to a JSON Lines file.
--
-- on_step(step, metrics) appends one line, {"metrics":{...},"step":N}, to
-- LOG_FILE in this script's folder, and returns an extra metric,
-- logged_lines (the lines this process has written), which meshrun logs
-- with the step's other metrics.
--
-- Use it from a recipe: copy this file next to the recipe (paths are
-- relative to it), then
--
--   [hooks]
--   script = "jsonl_logger.lua"
--   on_step = "on_step"      # the default; the function below
--
-- In the sandbox (the default) relative paths are taken from the script's
-- folder and files elsewhere are refused. With sandbox = false they would
-- be taken from the working directory, so the folder is found from the
-- script's own path, which only the debug library (absent in the sandbox)
-- can tell.

local json = require "meshrun.json"

local LOG_FILE = "steps.jsonl"

local folder = ""
if debug ~= nil then
  folder = debug.getinfo(1, "S").source:match("^@(.*/)") or ""
end

local logged_lines = 0

function on_step(step, metrics)
  local file = assert(io.open(folder .. LOG_FILE, "a"))
  -- One write per line, closed at once: a crash loses at most this line.
  file:write(json.encode({step = step, metrics = metrics}), "\n")
  file:close()
  logged_lines = logged_lines + 1
  return {logged_lines = logged_lines}
end
