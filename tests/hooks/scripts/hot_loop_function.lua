local function spin()
  local turns = 0
  while true do
    turns = turns + 1
  end
end

spin()
