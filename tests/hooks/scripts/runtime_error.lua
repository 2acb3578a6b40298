local function explode()
  error("configuration is broken")
end

local function set_up()
  explode()
end

set_up()
