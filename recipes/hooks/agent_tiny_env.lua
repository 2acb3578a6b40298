-- The environment of agent-tiny (recipes/agent-tiny.toml): a guessing game
-- that cannot be won in one turn. Each prompt hides a letter from a to h
-- (its line's "answer", [data] label_key, reaches reset as ctx.label). The
-- model guesses by writing a letter; the first of a..h in its reply counts.
-- A wrong guess is answered "higher" or "lower" with the letters still
-- possible, and the model guesses again, up to [env] max_turns times.
-- Finding the letter pays 1, less 0.25 for every turn it took; a later
-- guess that keeps to the hints earns 0.1 on the way; a reply without a
-- letter of a..h is told which letters are left and earns nothing.
local env = {}

local letters = "abcdefgh"

function env.reset(ctx)
  return {hidden = ctx.label, low = 1, high = #letters, turns = 0}
end

local function left(state)
  return letters:sub(state.low, state.high) .. ":"
end

function env.step(state, reply, ctx)
  state.turns = state.turns + 1
  local guess = reply:match("[a-h]")
  if guess == nil then
    return {observation = " one of " .. left(state), reward = 0, done = false}
  end
  if guess == state.hidden then
    return {reward = 1 - 0.25 * (state.turns - 1), done = true}
  end
  local at = letters:find(guess, 1, true)
  local kept_to_hints = state.turns > 1 and at >= state.low and at <= state.high
  local reward = kept_to_hints and 0.1 or 0
  if guess < state.hidden then
    state.low = math.max(state.low, at + 1)
    return {observation = " higher, one of " .. left(state), reward = reward, done = false}
  end
  state.high = math.min(state.high, at - 1)
  return {observation = " lower, one of " .. left(state), reward = reward, done = false}
end

return env
