-- meshrun.json: what decode gives, checked when the script loads.
local json = require "meshrun.json"

local function check(condition, what)
  if not condition then error("decode: " .. what, 2) end
end

local function refuses(text, expected_message)
  local ok, message = pcall(json.decode, text)
  if ok or message ~= expected_message then
    error(string.format("decode(%q): expected the error %q, got %s", text, expected_message, tostring(message)), 2)
  end
end

check(json.decode("3") == 3, "an integer")
check(json.decode(" -2.5e1 ") == -25, "a number with an exponent and spaces")
check(json.decode("true") == true and json.decode("false") == false, "booleans")
check(json.decode("null") == nil, "null is nil")
check(json.decode('"a\\"b\\\\c\\n\\u00e9\\ud83d\\ude00"') == 'a"b\\c\n\xc3\xa9\xf0\x9f\x98\x80', "escapes and surrogate pairs")
local value = json.decode('{"answer": [1, "two", {"three": 3}], "empty": [], "none": null}')
check(value.answer[1] == 1 and value.answer[2] == "two" and value.answer[3].three == 3, "nested tables")
check(value.none == nil, "a null member is absent")
check(json.encode(value.empty) == "[]", "an empty array stays an array")
-- Encoding what was decoded gives the same JSON back (keys sorted).
local text = '{"a":[1,2.5,"x",true],"b":{"c":false}}'
check(json.encode(json.decode(text)) == text, "round trip")

refuses("[1,", "json.decode: unexpected end of text at character 4")
refuses('{"a" 1}', "json.decode: expected ':' after a key at character 6")
refuses("[1] x", "json.decode: trailing characters at character 5")
refuses('"abc', "json.decode: unterminated string at character 1")
refuses(string.rep("[", 1000), "json.decode: nesting deeper than 200 levels at character 201")
refuses("", "json.decode: unexpected end of text at character 1")
refuses("{'a': 1}", "json.decode: expected a string key at character 2")
refuses('"tab\there"', "json.decode: control character in string at character 5")
local ok, message = pcall(json.decode, 42)
check(not ok and message == "json.decode: expected a string, got number", "a non-string argument")
