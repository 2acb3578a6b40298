-- Never ends: only the instruction limit stops it.
while true do end
