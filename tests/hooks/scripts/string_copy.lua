-- Changes the sandbox's copy of the string library, never the state's own.
string.shout = function(text)
  return text:upper() .. "!"
end
assert(("hi"):shout() == "HI!", "string methods should see the sandbox copy")
string.upper = nil
