-- The batch object of reward and on_rollout hooks: zero-copy views over the
-- caller's arrays, texts decoded on demand, and on_rollout's drop list.
--
-- Trusted code: batch_runtime.cpp runs this chunk once per Lua state, before
-- the script, with the real globals and the real ffi (a sandboxed script
-- only gets a restricted ffi). Everything it uses is captured in upvalues
-- here, so nothing a script later does to its globals or to the string
-- metatable changes it, and the pointers live only in tables keyed by the
-- proxies: batches, views and rows are userdata (newproxy), so a script can
-- neither rawget their insides nor replace their metatables, and `#v` works
-- (Lua 5.1 honours __len only for userdata).
--
-- Errors are raised at the script's line: `raise(level, ...)` counts levels
-- like error(), and a helper that raises takes the level as its caller would
-- pass it to error(). Calls that may raise are never tail calls, which would
-- drop a frame.
--
-- The state tables are weak-keyed by proxy, and LuaJIT has no ephemerons: a
-- state must never refer to its own proxy, or neither would be collected.
--
-- Returns {open = open(spec) -> batch, close = close(batch) -> dropped}.

local ffi = require("ffi")
local error, newproxy, getmetatable, setmetatable, tonumber, tostring, type, pairs, ipairs =
  error, newproxy, getmetatable, setmetatable, tonumber, tostring, type, pairs, ipairs
local format = string.format

-- Proxy -> its state; weak keys, so a dropped proxy takes its state along.
local batches = setmetatable({}, {__mode = "k"})
local views = setmetatable({}, {__mode = "k"})  -- vector, matrix and row proxies
local weak_values = {__mode = "v"}

local function raise(level, message)
  error(message, level + 1)
end

local function show(value)
  if type(value) == "string" then return format("%q", value) end
  return tostring(value)
end

local function is_position(value, count)
  return type(value) == "number" and value >= 1 and value <= count and value % 1 == 0
end

-- Why `value` is not a position in 1..count ("row 9 out of 1..8").
local function position_problem(what, value, count)
  if type(value) ~= "number" then return format("%s %s is not a number", what, show(value)) end
  if value % 1 ~= 0 then return format("%s %s is not an integer", what, show(value)) end
  return format("%s %s out of 1..%d", what, show(value), count)
end

local function closed_message(name)
  return name .. ": batch used after its hook returned"
end

------------------------------------------------------------------------------
-- Element types: how to read one, and what may be stored.

local function read_number(pointer, offset) return pointer[offset] end
-- An int64 element is a boxed cdata, useless as a table key or in string.char.
local function read_boxed(pointer, offset) return tonumber(pointer[offset]) end
local function read_flag(pointer, offset) return pointer[offset] ~= 0 end

local element_types = {
  int32 = {ctype = "int32_t", read = read_number, integer = true, lowest = -2 ^ 31, above = 2 ^ 31},
  int64 = {ctype = "int64_t", read = read_boxed, integer = true, lowest = -2 ^ 63, above = 2 ^ 63},
  float32 = {ctype = "float", read = read_number},
  float64 = {ctype = "double", read = read_number},
  uint8 = {ctype = "uint8_t", read = read_flag, flag = true},
}
for name, element in pairs(element_types) do
  element.name = name
  -- Read-only views go through const pointers: a write that slipped past the
  -- checks would still be refused by the FFI.
  element.read_only_pointer = ffi.typeof("const " .. element.ctype .. " *")
  element.writable_pointer = ffi.typeof(element.ctype .. " *")
end

-- The raw value to store for `value`, or nil and why it cannot be stored.
local function storable(element, value)
  if element.flag then
    if type(value) ~= "boolean" then
      return nil, format("expected true or false, got a %s", type(value))
    end
    return value and 1 or 0
  end
  if type(value) ~= "number" then return nil, format("expected a number, got a %s", type(value)) end
  if element.integer then
    if value % 1 ~= 0 then return nil, format("%s is not an integer", show(value)) end
    if value < element.lowest or value >= element.above then
      return nil, format("%s is out of the %s range", show(value), element.name)
    end
  end
  return value
end

-- Stores `value` at `offset`; `where` is a function giving the access path
-- for messages, built only when one is needed.
local function store(view, offset, value, where, first, second, level)
  if not view.writable then
    raise(level + 1, format("%s: %s is read-only", where(view.name, first, second), view.name))
  end
  local raw, problem = storable(view.element, value)
  if problem then raise(level + 1, where(view.name, first, second) .. ": " .. problem) end
  view.pointer[offset] = raw
end

local function path1(name, i)
  return format("%s[%s]", name, show(i))
end

local function path2(name, i, j)
  return format("%s[%s][%s]", name, show(i), show(j))
end

------------------------------------------------------------------------------
-- 1-D views: v[i], #v, v:get(i), v:set(i, x), v:totable().

local vector_proto = newproxy(true)
local vector_meta = getmetatable(vector_proto)
local vector_methods = {}

local function open_vector(proxy, method, level)
  local view = views[proxy]
  if view == nil or view.count == nil then
    raise(level + 1, format("%s: call it on a 1-D view, v:%s(...)", method, method))
  end
  if not view.call.open then raise(level + 1, closed_message(view.name)) end
  return view
end

local function vector_offset(view, i, level)
  if not is_position(i, view.count) then
    raise(level + 1, path1(view.name, i) .. ": " .. position_problem("index", i, view.count))
  end
  return i - 1
end

function vector_methods.get(proxy, i)
  local view = open_vector(proxy, "get", 2)
  local offset = vector_offset(view, i, 2)
  return view.read(view.pointer, offset)
end

function vector_methods.set(proxy, i, value)
  local view = open_vector(proxy, "set", 2)
  local offset = vector_offset(view, i, 2)
  store(view, offset, value, path1, i, nil, 2)
end

function vector_methods.totable(proxy)
  local view = open_vector(proxy, "totable", 2)
  local values, read, pointer = {}, view.read, view.pointer
  for i = 1, view.count do values[i] = read(pointer, i - 1) end
  return values
end

vector_meta.__index = function(proxy, key)
  local view = views[proxy]
  if not view.call.open then raise(2, closed_message(view.name)) end
  if is_position(key, view.count) then return view.read(view.pointer, key - 1) end
  if type(key) == "string" then
    if key == "name" then return view.name end
    return vector_methods[key]
  end
  raise(2, path1(view.name, key) .. ": " .. position_problem("index", key, view.count))
end

vector_meta.__newindex = function(proxy, key, value)
  local view = views[proxy]
  if not view.call.open then raise(2, closed_message(view.name)) end
  local offset = vector_offset(view, key, 2)
  store(view, offset, value, path1, key, nil, 2)
end

vector_meta.__len = function(proxy)
  local view = views[proxy]
  if not view.call.open then raise(2, closed_message(view.name)) end
  return view.count
end

vector_meta.__tostring = function(proxy)
  local view = views[proxy]
  return format("%s view %s[%d]%s", view.element.name, view.name, view.count,
                view.writable and " (writable)" or "")
end
vector_meta.__metatable = "meshrun batch view"

------------------------------------------------------------------------------
-- 2-D views: v[i][j] through row views, v:get(i, j), v:set(i, j, x),
-- v.rows, v.cols, #v (rows), #v[i] (cols), v:totable().

local matrix_proto = newproxy(true)
local matrix_meta = getmetatable(matrix_proto)
local matrix_methods = {}
local row_proto = newproxy(true)
local row_meta = getmetatable(row_proto)
local row_methods = {}

local function open_matrix(proxy, method, level)
  local view = views[proxy]
  if view == nil or view.rows == nil then
    raise(level + 1, format("%s: call it on a 2-D view, v:%s(...)", method, method))
  end
  if not view.call.open then raise(level + 1, closed_message(view.name)) end
  return view
end

local function matrix_offset(view, i, j, level)
  if not is_position(i, view.rows) then
    raise(level + 1, path2(view.name, i, j) .. ": " .. position_problem("row", i, view.rows))
  end
  if not is_position(j, view.cols) then
    raise(level + 1, path2(view.name, i, j) .. ": " .. position_problem("column", j, view.cols))
  end
  return (i - 1) * view.cols + j - 1
end

local function read_row(view, first, values)
  local read, pointer = view.read, view.pointer
  for j = 1, view.cols do values[j] = read(pointer, first + j - 1) end
  return values
end

function matrix_methods.get(proxy, i, j)
  local view = open_matrix(proxy, "get", 2)
  local offset = matrix_offset(view, i, j, 2)
  return view.read(view.pointer, offset)
end

function matrix_methods.set(proxy, i, j, value)
  local view = open_matrix(proxy, "set", 2)
  local offset = matrix_offset(view, i, j, 2)
  store(view, offset, value, path2, i, j, 2)
end

function matrix_methods.totable(proxy)
  local view = open_matrix(proxy, "totable", 2)
  local rows = {}
  for i = 1, view.rows do rows[i] = read_row(view, (i - 1) * view.cols, {}) end
  return rows
end

-- Row views are made on first use and cached (weakly: the row's state refers
-- to the matrix, see above), so v[i][j] in a loop allocates once per row.
local function row_view(view, i)
  local row = view.row_proxies[i]
  if row == nil then
    row = newproxy(row_proto)
    views[row] = {matrix = view, index = i, first = (i - 1) * view.cols}
    view.row_proxies[i] = row
  end
  return row
end

matrix_meta.__index = function(proxy, key)
  local view = views[proxy]
  if not view.call.open then raise(2, closed_message(view.name)) end
  if is_position(key, view.rows) then
    view.call.last_sample = key
    return row_view(view, key)
  end
  if type(key) == "string" then
    if key == "rows" or key == "cols" or key == "name" then return view[key] end
    return matrix_methods[key]
  end
  raise(2, path1(view.name, key) .. ": " .. position_problem("row", key, view.rows))
end

matrix_meta.__newindex = function(proxy, key)
  local view = views[proxy]
  raise(2, format("%s: assign elements, %s[i][j] = x or %s:set(i, j, x)", path1(view.name, key),
                  view.name, view.name))
end

matrix_meta.__len = function(proxy)
  local view = views[proxy]
  if not view.call.open then raise(2, closed_message(view.name)) end
  return view.rows
end

matrix_meta.__tostring = function(proxy)
  local view = views[proxy]
  return format("%s view %s[%d][%d]%s", view.element.name, view.name, view.rows, view.cols,
                view.writable and " (writable)" or "")
end
matrix_meta.__metatable = "meshrun batch view"

function row_methods.totable(proxy)
  local row = views[proxy]
  if row == nil or row.matrix == nil then raise(2, "totable: call it on a row view, row:totable()") end
  local view = row.matrix
  if not view.call.open then raise(2, closed_message(view.name)) end
  return read_row(view, row.first, {})
end

row_meta.__index = function(proxy, key)
  local row = views[proxy]
  local view = row.matrix
  if not view.call.open then raise(2, closed_message(view.name)) end
  if is_position(key, view.cols) then return view.read(view.pointer, row.first + key - 1) end
  if type(key) == "string" then return row_methods[key] end
  raise(2, path2(view.name, row.index, key) .. ": " .. position_problem("column", key, view.cols))
end

row_meta.__newindex = function(proxy, key, value)
  local row = views[proxy]
  local view = row.matrix
  if not view.call.open then raise(2, closed_message(view.name)) end
  if not is_position(key, view.cols) then
    raise(2, path2(view.name, row.index, key) .. ": " .. position_problem("column", key, view.cols))
  end
  store(view, row.first + key - 1, value, path2, row.index, key, 2)
end

row_meta.__len = function(proxy)
  local view = views[proxy].matrix
  if not view.call.open then raise(2, closed_message(view.name)) end
  return view.cols
end

row_meta.__tostring = function(proxy)
  local row = views[proxy]
  return format("row %d of %s view %s[%d][%d]", row.index, row.matrix.element.name,
                row.matrix.name, row.matrix.rows, row.matrix.cols)
end
row_meta.__metatable = "meshrun batch view"

------------------------------------------------------------------------------
-- The batch: batch.size, batch.<array>, batch.<field>, batch:prompt_text(i),
-- batch:response_text(i), batch:label(i), batch:drop(i).

local batch_proto = newproxy(true)
local batch_meta = getmetatable(batch_proto)
local batch_methods = {}

local function open_batch(proxy, method, i, level)
  local batch = batches[proxy]
  if batch == nil then raise(level + 1, format("%s: call it as batch:%s(i)", method, method)) end
  local where = format("batch:%s(%s)", method, show(i))
  if not batch.call.open then raise(level + 1, closed_message(where)) end
  if not is_position(i, batch.size) then
    raise(level + 1, where .. ": " .. position_problem("sample", i, batch.size))
  end
  batch.call.last_sample = i
  return batch
end

local function text(proxy, which, i)
  local method = which .. "_text"
  local batch = open_batch(proxy, method, i, 3)
  local cache = batch.texts[which]
  local cached = cache[i]
  if cached ~= nil then return cached end
  local decode = batch.decoders[which]
  if decode == nil then
    raise(3, format("batch:%s(%s): %s texts are not available in this batch", method, show(i), which))
  end
  local decoded, result = decode(i - 1)
  if not decoded then raise(3, format("batch:%s(%s): %s", method, show(i), result)) end
  cache[i] = result
  return result
end

function batch_methods.prompt_text(proxy, i)
  local result = text(proxy, "prompt", i)
  return result
end

function batch_methods.response_text(proxy, i)
  local result = text(proxy, "response", i)
  return result
end

-- The sample's label as a Lua value, nil when it has none. A table label is
-- decoded afresh on each call, so a hook that changes it changes its copy.
function batch_methods.label(proxy, i)
  local batch = open_batch(proxy, "label", i, 2)
  local decode = batch.decoders.label
  if decode == nil then return nil end
  local decoded, result = decode(i - 1)
  if not decoded then raise(2, format("batch:label(%s): %s", show(i), result)) end
  return result
end

function batch_methods.drop(proxy, i)
  local batch = open_batch(proxy, "drop", i, 2)
  if not batch.can_drop then
    raise(2, format("batch:drop(%s): only on_rollout hooks may drop samples (this is %s)", show(i),
                    batch.hook_point))
  end
  batch.dropped[i] = true
end

batch_meta.__index = function(proxy, key)
  local batch = batches[proxy]
  if not batch.call.open then raise(2, closed_message("batch." .. tostring(key))) end
  if key == "size" then return batch.size end
  local found = batch_methods[key]
  if found ~= nil then return found end
  found = batch.arrays[key]
  if found ~= nil then return found end
  return batch.fields[key]
end

batch_meta.__newindex = function(_, key)
  raise(2, format("batch.%s: the batch cannot be assigned to; write through its arrays' views",
                  tostring(key)))
end

batch_meta.__len = function(proxy)
  local batch = batches[proxy]
  if not batch.call.open then raise(2, closed_message("#batch")) end
  return batch.size
end

batch_meta.__tostring = function(proxy)
  return format("batch of %d samples", batches[proxy].size)
end
batch_meta.__metatable = "meshrun batch"

------------------------------------------------------------------------------
-- Opening and closing, for batch_binding.cpp.

-- spec: {size, hook_point, can_drop, prompt_text, response_text, label
-- (decoders: sample (0-based) -> true, text or value | false, message), fields = {name = value},
-- arrays = {{name, type, data (light userdata), rows, cols (2-D only),
-- writable}, ...}}. The C++ side has checked names, types and shapes.
local function open(spec)
  local call = {open = true}
  local batch = {
    size = spec.size, hook_point = spec.hook_point, can_drop = spec.can_drop, call = call,
    arrays = {}, fields = {}, views = {}, dropped = {},
    decoders = {prompt = spec.prompt_text, response = spec.response_text, label = spec.label},
    texts = {prompt = {}, response = {}},
  }
  for _, array in ipairs(spec.arrays) do
    local element = element_types[array.type]
    local writable = array.writable
    local view = {
      name = array.name, element = element, read = element.read, writable = writable, call = call,
      pointer = ffi.cast(writable and element.writable_pointer or element.read_only_pointer, array.data),
    }
    local proxy
    if array.cols ~= nil then
      view.rows, view.cols = array.rows, array.cols
      view.row_proxies = setmetatable({}, weak_values)
      proxy = newproxy(matrix_proto)
    else
      view.count = array.rows
      proxy = newproxy(vector_proto)
    end
    views[proxy] = view
    batch.arrays[array.name] = proxy
    batch.views[#batch.views + 1] = view
  end
  for name, value in pairs(spec.fields) do batch.fields[name] = value end
  local proxy = newproxy(batch_proto)
  batches[proxy] = batch
  return proxy
end

-- Ends the call: every view and the batch refuse further use, and the
-- pointers and decoders are let go. Returns the dropped samples, 1-based,
-- in order, and the last sample the hook read (a text, a label or a matrix
-- row), or nil.
local function close(proxy)
  local batch = batches[proxy]
  batch.call.open = false
  for _, view in ipairs(batch.views) do view.pointer = nil end
  batch.decoders = {}
  local dropped = {}
  for i = 1, batch.size do
    if batch.dropped[i] then dropped[#dropped + 1] = i end
  end
  return dropped, batch.call.last_sample
end

return {open = open, close = close}
