// Internal to the recipe subsystem: the fluent builder used by the key
// bindings, and the functions that fill the schema.
#pragma once

#include <initializer_list>

#include "meshrun/recipe/schema.hpp"

namespace meshrun::schema_detail {

class KeyRef {
 public:
  explicit KeyRef(KeySpec& spec) : spec_(spec) {}
  KeyRef& choices(std::initializer_list<const char*> values) {
    for (const char* v : values) spec_.choices.emplace_back(v);
    return *this;
  }
  KeyRef& min(double value) { spec_.min = value; return *this; }
  KeyRef& min_exclusive(double value) { spec_.min = value; spec_.min_exclusive = true; return *this; }
  KeyRef& max(double value) { spec_.max = value; return *this; }
  KeyRef& max_exclusive(double value) { spec_.max = value; spec_.max_exclusive = true; return *this; }
  KeyRef& also_allowed(std::initializer_list<long long> values) {
    spec_.also_allowed.assign(values);
    return *this;
  }
  KeyRef& path(PathKind kind) { spec_.path_kind = kind; return *this; }
  // A std::string field that holds a free-form TOML table as JSON text.
  KeyRef& free_table() { spec_.type = ValueType::table; return *this; }
  KeyRef& required() { spec_.required = true; return *this; }
  KeyRef& default_is(std::string text) { spec_.default_text = std::move(text); return *this; }
  KeyRef& synonym(std::string written, std::string meant) {
    spec_.synonyms.emplace_back(std::move(written), std::move(meant));
    return *this;
  }

 private:
  KeySpec& spec_;
};

// A bound as the schema prints it: 1e-06, 0.5, 8.
std::string number_text(double value);  // schema.cpp

void bind_all_keys(Schema& schema);   // schema_keys.cpp

}  // namespace meshrun::schema_detail
