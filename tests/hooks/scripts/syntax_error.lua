-- The third line has a syntax error.
local x = 1
local y = = 2
