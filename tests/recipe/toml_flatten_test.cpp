// Tests of src/recipe/toml_flatten.cpp: TOML to located, dotted entries.
#include <doctest/doctest.h>

#include <chrono>

#include "src/recipe/toml_flatten.hpp"
#include "diagnostic_matchers.hpp"

namespace meshrun {
namespace {

using test::has_rule;

const FlatEntry* entry_named(const FlatDocument& document, const std::string& key) {
  for (const auto& entry : document.entries)
    if (entry.key == key) return &entry;
  return nullptr;
}

const FlatTable* table_named(const FlatDocument& document, const std::string& path) {
  for (const auto& table : document.tables)
    if (table.path == path) return &table;
  return nullptr;
}

TEST_CASE("flatten_toml turns every value into a dotted key with its key and value positions") {
  // Columns:          1234567890123456789
  const char* text = "algorithm = \"sft\"\n"  // line 1
                     "\n"                       // line 2
                     "[launch]\n"               // line 3
                     "nodes = 2\n"              // line 4
                     "  procs_per_node = 4\n";  // line 5
  FlatDocument document;
  Diagnostics diagnostics;
  REQUIRE(flatten_toml(text, "r.toml", "/recipes", document, diagnostics));
  CHECK(diagnostics.empty());
  CHECK(document.file == "r.toml");
  CHECK(document.entries.size() == 3);

  const FlatEntry* algorithm = entry_named(document, "algorithm");
  REQUIRE(algorithm);
  CHECK(algorithm->key_location == SourceLocation{"r.toml", 1, 1});
  CHECK(algorithm->value_location == SourceLocation{"r.toml", 1, 13});
  CHECK(algorithm->value->value<std::string>() == "sft");
  CHECK(algorithm->base_dir == "/recipes");

  const FlatEntry* nodes = entry_named(document, "launch.nodes");
  REQUIRE(nodes);
  CHECK(nodes->key_location == SourceLocation{"r.toml", 4, 1});
  CHECK(nodes->value_location == SourceLocation{"r.toml", 4, 9});
  CHECK(nodes->value->value<int64_t>() == 2);

  const FlatEntry* procs = entry_named(document, "launch.procs_per_node");
  REQUIRE(procs);
  CHECK(procs->key_location == SourceLocation{"r.toml", 5, 3});
  CHECK(procs->value_location == SourceLocation{"r.toml", 5, 20});
  CHECK(procs->base_dir == "/recipes");
}

TEST_CASE("flatten_toml lists tables, implicit parents located at their name in the header") {
  // Columns:  123456789012345678
  const char* text = "[roles.actor]\n"        // line 1
                     "model = \"m\"\n"        // line 2
                     "[roles.critic.mesh]\n"  // line 3
                     "tp = 2\n";              // line 4
  FlatDocument document;
  Diagnostics diagnostics;
  REQUIRE(flatten_toml(text, "r.toml", ".", document, diagnostics));

  std::vector<std::string> paths;
  for (const auto& table : document.tables) paths.push_back(table.path);
  CHECK(paths.size() == 4);
  const FlatTable* roles = table_named(document, "roles");
  const FlatTable* actor = table_named(document, "roles.actor");
  const FlatTable* critic = table_named(document, "roles.critic");
  const FlatTable* critic_mesh = table_named(document, "roles.critic.mesh");
  REQUIRE(roles);
  REQUIRE(actor);
  REQUIRE(critic);
  REQUIRE(critic_mesh);
  CHECK(roles->location == SourceLocation{"r.toml", 1, 2});
  CHECK(actor->location == SourceLocation{"r.toml", 1, 8});
  CHECK(critic->location == SourceLocation{"r.toml", 3, 8});
  CHECK(critic_mesh->location == SourceLocation{"r.toml", 3, 15});
  REQUIRE(entry_named(document, "roles.critic.mesh.tp"));
  CHECK(entry_named(document, "roles.critic.mesh.tp")->key_location == SourceLocation{"r.toml", 4, 1});
}

TEST_CASE("dotted keys and inline tables flatten like headers") {
  // Columns:  123456789012345678901234
  const char* text = "mesh = { tp = 2, sp = 1 }\n"        // line 1
                     "colocate.groups = [[\"actor\"]]\n";  // line 2
  FlatDocument document;
  Diagnostics diagnostics;
  REQUIRE(flatten_toml(text, "r.toml", ".", document, diagnostics));
  REQUIRE(table_named(document, "mesh"));
  CHECK(table_named(document, "mesh")->location == SourceLocation{"r.toml", 1, 1});
  REQUIRE(table_named(document, "colocate"));
  CHECK(table_named(document, "colocate")->location == SourceLocation{"r.toml", 2, 1});

  const FlatEntry* tp = entry_named(document, "mesh.tp");
  REQUIRE(tp);
  CHECK(tp->key_location == SourceLocation{"r.toml", 1, 10});
  CHECK(tp->value_location == SourceLocation{"r.toml", 1, 15});
  REQUIRE(entry_named(document, "mesh.sp"));

  SUBCASE("arrays stay one entry") {
    const FlatEntry* groups = entry_named(document, "colocate.groups");
    REQUIRE(groups);
    CHECK(groups->value->is_array());
    CHECK(groups->key_location == SourceLocation{"r.toml", 2, 10});
    CHECK(groups->value_location == SourceLocation{"r.toml", 2, 19});
    CHECK(document.entries.size() == 3);
  }
}

TEST_CASE("entries point into the document's own tree, which outlives the parse") {
  FlatDocument document;
  Diagnostics diagnostics;
  {
    std::string text = "seed = 7\n";
    REQUIRE(flatten_toml(text, "r.toml", ".", document, diagnostics));
  }  // the text is gone; the tree is not
  REQUIRE(document.root);
  REQUIRE(document.entries.size() == 1);
  CHECK(document.entries[0].value == document.root->get("seed"));
  CHECK(document.entries[0].value->value<int64_t>() == 7);
}

TEST_CASE("flatten_toml reports invalid TOML as schema.syntax at the error") {
  Diagnostics diagnostics;
  FlatDocument document;

  SUBCASE("a missing value") {
    CHECK_FALSE(flatten_toml("a = 1\nb = \n", "bad.toml", ".", document, diagnostics));
    auto d = FIND_DIAGNOSTIC(diagnostics, "schema.syntax", 2, 5);
    REQUIRE(d);
    CHECK(d->where.file == "bad.toml");
    CHECK(d->message.rfind("invalid TOML: ", 0) == 0);
    CHECK(d->message.find("expected value") != std::string::npos);
  }
  SUBCASE("a key defined twice") {
    CHECK_FALSE(flatten_toml("a = 1\na = 2\n", "bad.toml", ".", document, diagnostics));
    auto d = FIND_DIAGNOSTIC(diagnostics, "schema.syntax", 2, 5);
    REQUIRE(d);
    CHECK(d->message.find("redefine") != std::string::npos);
  }
  SUBCASE("a table defined twice") {
    CHECK_FALSE(flatten_toml("[a]\nx = 1\n[a]\n", "bad.toml", ".", document, diagnostics));
    CHECK_DIAGNOSTIC(diagnostics, "schema.syntax", 3, 1);
  }
  CHECK(diagnostics.error_count() == 1);
  CHECK(document.entries.empty());
}

TEST_CASE("describe_node names the TOML type and the value") {
  FlatDocument document;
  Diagnostics diagnostics;
  const char* text = "s = \"x y\"\n"
                     "i = -3\n"
                     "f = 1.5\n"
                     "t = true\n"
                     "n = false\n"
                     "a = [1, 2]\n"
                     "d = 1979-05-27\n"
                     "tm = 07:32:00\n"
                     "dt = 1979-05-27T07:32:00Z\n"
                     "tb = { k = 1 }\n";
  REQUIRE(flatten_toml(text, "r.toml", ".", document, diagnostics));
  auto describe = [&](const char* key) { return describe_node(*document.root->get(key)); };
  CHECK(describe("s") == "string \"x y\"");
  CHECK(describe("i") == "integer -3");
  CHECK(describe("f") == "float 1.5");
  CHECK(describe("t") == "true");
  CHECK(describe("n") == "false");
  CHECK(describe("a") == "array");
  CHECK(describe("d") == "date");
  CHECK(describe("tm") == "time");
  CHECK(describe("dt") == "date-time");
  CHECK(describe("tb") == "table");
}

TEST_CASE("location_of converts a toml++ region to a 1-based SourceLocation") {
  toml::source_region region;
  region.begin = {12, 34};
  region.end = {12, 40};
  CHECK(location_of(region, "f.toml") == SourceLocation{"f.toml", 12, 34});
}


std::string repeated(const std::string& part, const std::string& separator, int count) {
  std::string out = part;
  for (int i = 1; i < count; ++i) out += separator + part;
  return out;
}

TEST_CASE("keys nesting past 32 levels are a located syntax error, before toml++ recurses on them") {
  auto flatten = [](const std::string& text, Diagnostics& diagnostics) {
    FlatDocument document;
    return flatten_toml(text, "deep.toml", "", document, diagnostics);
  };
  SUBCASE("a dotted key of 25000 parts (a stack overflow in toml++)") {
    Diagnostics diagnostics;
    CHECK_FALSE(flatten("algorithm = \"sft\"\n" + repeated("a", ".", 25001) + " = 1\n", diagnostics));
    auto d = FIND_DIAGNOSTIC(diagnostics, "schema.syntax", 2, 1);
    REQUIRE(d);
    CHECK(d->message.find("more than 32 levels") != std::string::npos);
  }
  SUBCASE("a table header, and an array-of-tables header") {
    Diagnostics diagnostics;
    CHECK_FALSE(flatten("x = 1\n[" + repeated("a", ".", 25000) + "]\nb = 1\n", diagnostics));
    CHECK_DIAGNOSTIC(diagnostics, "schema.syntax", 2, 2);
    Diagnostics array_diagnostics;
    CHECK_FALSE(flatten("[[ " + repeated("a", " . ", 40) + " ]]\n", array_diagnostics));
    CHECK_DIAGNOSTIC(array_diagnostics, "schema.syntax", 1, 4);
  }
  SUBCASE("header parts and key parts add up") {
    Diagnostics diagnostics;
    CHECK_FALSE(flatten("[" + repeated("a", ".", 20) + "]\n  " + repeated("b", ".", 13) + " = 1\n", diagnostics));
    CHECK_DIAGNOSTIC(diagnostics, "schema.syntax", 2, 3);
    Diagnostics fine;
    CHECK(flatten("[" + repeated("a", ".", 20) + "]\n" + repeated("b", ".", 12) + " = 1\n", fine));
    CHECK_NO_ERRORS(fine);
  }
  SUBCASE("inside inline tables and arrays") {
    Diagnostics diagnostics;
    CHECK_FALSE(flatten("a = {" + repeated("b", ".", 40) + " = 1}\n", diagnostics));
    CHECK_DIAGNOSTIC(diagnostics, "schema.syntax", 1, 6);
    Diagnostics nested;
    std::string text = "a = ";
    for (int i = 0; i < 40; ++i) text += "{b = ";
    CHECK_FALSE(flatten(text + "1" + std::string(40, '}') + "\n", nested));
    CHECK(has_rule(nested, "schema.syntax"));
    Diagnostics arrays;
    CHECK_FALSE(flatten("a = " + std::string(3000, '[') + std::string(3000, ']') + "\n", arrays));
    CHECK(has_rule(arrays, "schema.syntax"));
  }
  SUBCASE("dots and brackets in strings and comments, and quoted keys, are not levels") {
    Diagnostics diagnostics;
    const std::string dots = repeated("a", ".", 100);
    const std::string text = "\"" + dots + "\" = 1\n" +
                             "'x" + dots + "' = 2\n" +
                             "b = \"" + std::string(100, '[') + "\"\n" +
                             "c = '''\n" + dots + " = [[[[\n'''\n" +
                             "# " + dots + "\n" +
                             "d = [\"]]]]\", {e = \"" + dots + "\"}]\n" +
                             repeated("f", ".", 32) + " = 3\n";
    CHECK(flatten(text, diagnostics));
    CHECK_NO_ERRORS(diagnostics);
  }
}

TEST_CASE("a deep dotted key takes no time to reject") {
  // 10,000 parts once took seconds in the schema check; now the scan stops it.
  const auto start = std::chrono::steady_clock::now();
  FlatDocument document;
  Diagnostics diagnostics;
  CHECK_FALSE(flatten_toml("algorithm = \"sft\"\n" + repeated("a", ".", 10000) + " = 1\n", "d.toml", "", document,
                           diagnostics));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));
}

}  // namespace
}  // namespace meshrun
