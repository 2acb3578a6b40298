// Tests of src/recipe/diagnostics.cpp: locations, formatting, counting and
// the deterministic order of diagnostics.
#include <doctest/doctest.h>

#include "meshrun/recipe/diagnostics.hpp"

namespace meshrun {
namespace {

TEST_CASE("SourceLocation::str names the file, line and column that are known") {
  CHECK(SourceLocation{"a.toml", 3, 7}.str() == "a.toml:3:7");
  CHECK(SourceLocation{"a.toml", 3, 0}.str() == "a.toml:3");
  CHECK(SourceLocation{"a.toml", 0, 0}.str() == "a.toml");
  CHECK(SourceLocation{"a.toml", 0, 5}.str() == "a.toml");
  CHECK(SourceLocation{"", 3, 7}.str() == "<command line>");
}

TEST_CASE("SourceLocation compares every field") {
  CHECK(SourceLocation{"a", 1, 2} == SourceLocation{"a", 1, 2});
  CHECK_FALSE(SourceLocation{"a", 1, 2} == SourceLocation{"b", 1, 2});
  CHECK_FALSE(SourceLocation{"a", 1, 2} == SourceLocation{"a", 2, 2});
  CHECK_FALSE(SourceLocation{"a", 1, 2} == SourceLocation{"a", 1, 3});
}

TEST_CASE("severity names") {
  CHECK(std::string(severity_name(Severity::error)) == "error");
  CHECK(std::string(severity_name(Severity::warning)) == "warning");
  CHECK(std::string(severity_name(Severity::note)) == "note");
}

TEST_CASE("format_diagnostic writes location, severity, message, rule and help") {
  Diagnostic d{Severity::error, {"r.toml", 4, 9}, "mesh.product", "tp × sp × dp = 8, but 4 processes",
               "set dp = -1"};
  CHECK(format_diagnostic(d) ==
        "r.toml:4:9: error: tp × sp × dp = 8, but 4 processes [mesh.product]\n"
        "  help: set dp = -1\n");

  SUBCASE("without a suggestion there is no help line") {
    d.suggestion.clear();
    CHECK(format_diagnostic(d) == "r.toml:4:9: error: tp × sp × dp = 8, but 4 processes [mesh.product]\n");
  }
  SUBCASE("without a rule there is no bracket") {
    d.rule.clear();
    d.suggestion.clear();
    CHECK(format_diagnostic(d) == "r.toml:4:9: error: tp × sp × dp = 8, but 4 processes\n");
  }
  SUBCASE("warnings and a whole-file location") {
    d.severity = Severity::warning;
    d.where = {"r.toml", 0, 0};
    d.suggestion.clear();
    CHECK(format_diagnostic(d) == "r.toml: warning: tp × sp × dp = 8, but 4 processes [mesh.product]\n");
  }
}

TEST_CASE("Diagnostics counts errors and warnings separately") {
  Diagnostics diagnostics;
  CHECK(diagnostics.empty());
  CHECK_FALSE(diagnostics.has_errors());

  diagnostics.warning({"a", 1, 1}, "roles.unused", "unused");
  CHECK_FALSE(diagnostics.empty());
  CHECK_FALSE(diagnostics.has_errors());
  CHECK(diagnostics.warning_count() == 1);

  diagnostics.error({"a", 2, 1}, "mesh.infer", "cannot infer", "fix it");
  diagnostics.add({Severity::note, {"a", 3, 1}, "x", "a note", ""});
  CHECK(diagnostics.has_errors());
  CHECK(diagnostics.error_count() == 1);
  CHECK(diagnostics.warning_count() == 1);
  REQUIRE(diagnostics.items().size() == 3);
  CHECK(diagnostics.items()[1].severity == Severity::error);
  CHECK(diagnostics.items()[1].rule == "mesh.infer");
  CHECK(diagnostics.items()[1].suggestion == "fix it");
}

TEST_CASE("sorted orders by file, line and column, keeping the reporting order of ties") {
  Diagnostics diagnostics;
  diagnostics.error({"b.toml", 1, 1}, "r1", "b first");
  diagnostics.error({"a.toml", 10, 2}, "r2", "a line 10 col 2");
  diagnostics.error({"a.toml", 2, 5}, "r3", "a line 2");
  diagnostics.error({"a.toml", 10, 1}, "r4", "a line 10 col 1");
  diagnostics.error({"a.toml", 2, 5}, "r5", "a line 2 again");
  diagnostics.error({"", 0, 0}, "r6", "command line");

  auto sorted = diagnostics.sorted();
  std::vector<std::string> rules;
  for (const auto& d : sorted) rules.push_back(d.rule);
  CHECK(rules == std::vector<std::string>{"r6", "r3", "r5", "r4", "r2", "r1"});
  // items() keeps the reporting order.
  CHECK(diagnostics.items().front().rule == "r1");
}

TEST_CASE("format concatenates the sorted diagnostics") {
  Diagnostics diagnostics;
  diagnostics.error({"a.toml", 2, 1}, "second", "two");
  diagnostics.warning({"a.toml", 1, 1}, "first", "one", "help one");
  CHECK(diagnostics.format() ==
        "a.toml:1:1: warning: one [first]\n"
        "  help: help one\n"
        "a.toml:2:1: error: two [second]\n");
  CHECK(Diagnostics{}.format().empty());
}

TEST_CASE("append adds the other sink's diagnostics after one's own") {
  Diagnostics a, b;
  a.error({"a", 1, 1}, "one", "1");
  b.warning({"a", 1, 1}, "two", "2");
  b.error({"a", 1, 1}, "three", "3");
  a.append(b);
  REQUIRE(a.items().size() == 3);
  CHECK(a.items()[1].rule == "two");
  CHECK(a.items()[2].rule == "three");
  CHECK(a.error_count() == 2);
  CHECK(b.items().size() == 2);
}

TEST_CASE("DiagnosticError carries the diagnostics and formats them as its message") {
  Diagnostics diagnostics;
  diagnostics.error({"r.toml", 1, 2}, "schema.type", "bad", "good");
  try {
    throw DiagnosticError(diagnostics);
  } catch (const std::exception& error) {
    CHECK(std::string(error.what()) == "r.toml:1:2: error: bad [schema.type]\n  help: good\n");
    const auto* typed = dynamic_cast<const DiagnosticError*>(&error);
    REQUIRE(typed != nullptr);
    CHECK(typed->diagnostics().error_count() == 1);
  }
}


TEST_CASE("format_diagnostic writes control characters of quoted user text escaped") {
  using namespace std::string_literals;
  Diagnostic d{Severity::error, {"r.toml", 3, 1}, "schema.unknown-key",
               "unknown key \"train\0x\x1b[31m\x7f\xc2\x9b\" in [batch]"s, "did you mean \"tr\tain\"?"};
  const std::string text = format_diagnostic(d);
  CHECK(text ==
        "r.toml:3:1: error: unknown key \"train\\x00x\\x1b[31m\\x7f\\u009b\" in [batch] [schema.unknown-key]\n"
        "  help: did you mean \"tr\tain\"?\n");
  CHECK(text.find('\0') == std::string::npos);

  SUBCASE("a line break continues indented, so no quoted text starts a line of its own") {
    d.message = "unknown key \"a\nr.toml:1:1: error: forged\"";
    d.suggestion.clear();
    CHECK(format_diagnostic(d) ==
          "r.toml:3:1: error: unknown key \"a\n    r.toml:1:1: error: forged\" [schema.unknown-key]\n");
  }
  SUBCASE("UTF-8 text is kept as it is") {
    d.message = "tp × sp — ü";
    d.suggestion.clear();
    CHECK(format_diagnostic(d) == "r.toml:3:1: error: tp × sp — ü [schema.unknown-key]\n");
  }
}

}  // namespace
}  // namespace meshrun
