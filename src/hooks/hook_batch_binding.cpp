// Handing a HookBatch to Lua: the spec table batch_runtime.lua's open()
// takes, the text decoders that call back into C++, and closing.
#include "hook_batch_binding.hpp"

#include <algorithm>
#include <exception>
#include <lua.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "batch_runtime.hpp"
#include "instruction_limit.hpp"

namespace meshrun::hooks_detail {

bool push_json(lua_State* state, const nlohmann::json& value, int depth) {
  if (depth > kMaxLabelDepth || !lua_checkstack(state, 3)) return false;
  switch (value.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      lua_pushnil(state);
      return true;
    case nlohmann::json::value_t::boolean:
      lua_pushboolean(state, value.get<bool>());
      return true;
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
    case nlohmann::json::value_t::number_float:
      lua_pushnumber(state, value.get<double>());
      return true;
    case nlohmann::json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      lua_pushlstring(state, text.data(), text.size());
      return true;
    }
    case nlohmann::json::value_t::binary:
      lua_pushnil(state);
      return true;
    case nlohmann::json::value_t::array: {
      lua_createtable(state, static_cast<int>(std::min<std::size_t>(value.size(), 1 << 20)), 0);
      int index = 0;
      for (const auto& item : value) {
        ++index;
        if (!push_json(state, item, depth + 1)) return false;
        lua_rawseti(state, -2, index);
      }
      return true;
    }
    case nlohmann::json::value_t::object: {
      lua_createtable(state, 0, static_cast<int>(std::min<std::size_t>(value.size(), 1 << 20)));
      for (const auto& [key, item] : value.items()) {
        lua_pushlstring(state, key.data(), key.size());
        if (!push_json(state, item, depth + 1)) return false;
        lua_rawset(state, -3);
      }
      return true;
    }
  }
  return false;
}

namespace {

struct OpenRequest {
  const HookBatch* batch;
  std::string_view hook_point;
  BatchAccess access;
};

// decoder(sample) with sample 0-based (checked by the runtime) -> true, text
// or false, message. It returns the failure rather than raising it, so the
// runtime raises it at the script's line. Upvalue 1: the HookBatch; upvalue
// 2: true for responses, false for prompts.
int decode_text(lua_State* state) {
  const auto* batch = static_cast<const HookBatch*>(lua_touserdata(state, lua_upvalueindex(1)));
  const bool response = lua_toboolean(state, lua_upvalueindex(2));
  const auto sample = static_cast<int64_t>(lua_tonumber(state, 1));
  const auto& decode = response ? batch->response_text : batch->prompt_text;
  std::string text;
  bool decoded = false;
  try {
    text = decode(sample);
    decoded = true;
  } catch (const std::exception& error) {
    text = std::string("decoding failed: ") + error.what();
  } catch (...) {
    text = "decoding failed with an unknown exception";
  }
  lua_pushboolean(state, decoded);
  lua_pushlstring(state, text.data(), text.size());
  return 2;
}

// decoder(sample) with sample 0-based -> true, value or false, message.
// Upvalue 1: the HookBatch.
int decode_label(lua_State* state) {
  const auto* batch = static_cast<const HookBatch*>(lua_touserdata(state, lua_upvalueindex(1)));
  const auto sample = static_cast<int64_t>(lua_tonumber(state, 1));
  const nlohmann::json* label = nullptr;
  std::string problem;
  try {
    label = batch->label(sample);
  } catch (const std::exception& error) {
    problem = std::string("reading the label failed: ") + error.what();
  }
  if (problem.empty()) {
    const int top = lua_gettop(state);
    lua_pushboolean(state, 1);
    if (label == nullptr) {
      lua_pushnil(state);
      return 2;
    }
    if (push_json(state, *label, 1)) return 2;
    lua_settop(state, top);
    problem = "the label nests deeper than " + std::to_string(kMaxLabelDepth) + " levels";
  }
  lua_pushboolean(state, 0);
  lua_pushlstring(state, problem.data(), problem.size());
  return 2;
}

void set_string(lua_State* state, const char* key, std::string_view value) {
  lua_pushlstring(state, value.data(), value.size());
  lua_setfield(state, -2, key);
}

void set_number(lua_State* state, const char* key, double value) {
  lua_pushnumber(state, value);
  lua_setfield(state, -2, key);
}

void set_boolean(lua_State* state, const char* key, bool value) {
  lua_pushboolean(state, value);
  lua_setfield(state, -2, key);
}

void set_decoder(lua_State* state, const char* key, const HookBatch& batch, bool response) {
  const auto& decode = response ? batch.response_text : batch.prompt_text;
  if (!decode) return;
  lua_pushlightuserdata(state, const_cast<HookBatch*>(&batch));
  lua_pushboolean(state, response);
  lua_pushcclosure(state, decode_text, 2);
  lua_setfield(state, -2, key);
}

void push_array_spec(lua_State* state, const HookArray& array, BatchAccess access) {
  lua_createtable(state, 0, 6);
  set_string(state, "name", array.name);
  set_string(state, "type", element_type_name(array.type));
  lua_pushlightuserdata(state, array.data);
  lua_setfield(state, -2, "data");
  set_number(state, "rows", static_cast<double>(array.shape[0]));
  if (array.shape.size() == 2) set_number(state, "cols", static_cast<double>(array.shape[1]));
  set_boolean(state, "writable", access == BatchAccess::rewritable && array.writable);
}

// Run under lua_cpcall (build_protected): pushes runtime.open(spec).
void open_in_lua(lua_State* state, const void* context) {
  const auto& request = *static_cast<const OpenRequest*>(context);
  const HookBatch& batch = *request.batch;
  push_batch_runtime_function(state, "open");
  lua_createtable(state, 0, 7);
  set_number(state, "size", static_cast<double>(batch.size));
  set_string(state, "hook_point", request.hook_point);
  set_boolean(state, "can_drop", request.access == BatchAccess::rewritable);
  set_decoder(state, "prompt_text", batch, false);
  set_decoder(state, "response_text", batch, true);
  if (batch.label) {
    lua_pushlightuserdata(state, const_cast<HookBatch*>(&batch));
    lua_pushcclosure(state, decode_label, 1);
    lua_setfield(state, -2, "label");
  }

  lua_createtable(state, static_cast<int>(batch.arrays.size()), 0);
  for (std::size_t index = 0; index < batch.arrays.size(); ++index) {
    push_array_spec(state, batch.arrays[index], request.access);
    lua_rawseti(state, -2, static_cast<int>(index + 1));
  }
  lua_setfield(state, -2, "arrays");

  lua_createtable(state, 0, static_cast<int>(batch.fields.size()));
  for (const auto& [name, value] : batch.fields) {
    lua_pushlstring(state, name.data(), name.size());
    lua_pushnumber(state, value);
    lua_rawset(state, -3);
  }
  lua_setfield(state, -2, "fields");

  lua_call(state, 1, 1);
}

int open_batch_object(const HookScript& script, std::string_view hook_point, const HookBatch& batch,
                      BatchAccess access) {
  check_hook_batch(batch);
  const OpenRequest request{&batch, hook_point, access};
  return build_protected(script, hook_point, open_in_lua, &request);
}

struct CloseRequest {
  const RegistryValue* batch_object;
  std::vector<int64_t>* dropped;
  int64_t* last_sample;
};

// Run under lua_cpcall: runtime.close(batch), its dropped list converted.
int close_in_lua(lua_State* state) {
  const auto& request = *static_cast<const CloseRequest*>(lua_touserdata(state, 1));
  push_batch_runtime_function(state, "close");
  request.batch_object->push();
  lua_call(state, 1, 2);
  *request.last_sample = lua_isnumber(state, -1) ? static_cast<int64_t>(lua_tonumber(state, -1)) : 0;
  lua_pop(state, 1);
  const int count = static_cast<int>(lua_objlen(state, -1));
  request.dropped->reserve(static_cast<std::size_t>(count));
  for (int index = 1; index <= count; ++index) {
    lua_rawgeti(state, -1, index);
    request.dropped->push_back(static_cast<int64_t>(lua_tonumber(state, -1)) - 1);
    lua_pop(state, 1);
  }
  return 0;
}

}  // namespace

const char* element_type_name(HookArrayType type) {
  switch (type) {
    case HookArrayType::int32:
      return "int32";
    case HookArrayType::int64:
      return "int64";
    case HookArrayType::float32:
      return "float32";
    case HookArrayType::float64:
      return "float64";
    case HookArrayType::uint8:
      return "uint8";
  }
  return nullptr;
}

OpenBatch::OpenBatch(const HookScript& script, std::string_view hook_point, const HookBatch& batch,
                     BatchAccess access)
    : script_(script),
      hook_point_(hook_point),
      batch_object_(script.state(), open_batch_object(script, hook_point, batch, access)) {}

OpenBatch::~OpenBatch() {
  if (closed_) return;
  try {
    close();
  } catch (...) {
    // Only running out of memory gets here; the hook's own error, if any, is
    // the one on its way out.
  }
}

void OpenBatch::push() const { batch_object_.push(); }

std::vector<int64_t> OpenBatch::close() {
  closed_ = true;
  std::vector<int64_t> dropped;
  const CloseRequest request{&batch_object_, &dropped, &last_sample_};
  lua_State* state = script_.state();
  if (lua_cpcall(state, close_in_lua, const_cast<CloseRequest*>(&request)) != 0) {
    std::string message = lua_tostring(state, -1) != nullptr ? lua_tostring(state, -1) : "";
    lua_pop(state, 1);
    throw HookError(script_.path(), 0, hook_point_, "cannot close the batch: " + message, "");
  }
  return dropped;
}

HookError with_last_sample(const HookError& error, OpenBatch& open, int64_t size) {
  if (!is_limit_message(error.message())) return error;
  if (!open.closed()) open.close();
  if (open.last_sample() <= 0) return error;
  return HookError(error.script(), error.line(), error.hook_point(),
                   error.message() + " while at sample " + std::to_string(open.last_sample()) + " of " +
                       std::to_string(size),
                   error.traceback());
}

}  // namespace meshrun::hooks_detail
