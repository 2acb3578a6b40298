assert(string.shout == nil, "another script's string.shout leaked")
assert(type(string.upper) == "function", "another script's removal of string.upper leaked")
