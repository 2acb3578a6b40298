// Diagnostics: located errors and warnings, collected rather than thrown.
//
// Every check in meshrun (recipe schema, cross-field rules, planner, hook
// scripts) reports through a Diagnostics sink so that a user sees every
// problem of a recipe in one run. A Diagnostic always names the rule it comes
// from (a stable id such as "mesh.product", documented in docs/recipes.md) and
// a location; `sorted()` orders them by file, line and column so output is
// deterministic.
#pragma once

#include <string>
#include <vector>
#include "meshrun/error.hpp"

namespace meshrun {

// A position in a recipe file (1-based line and column). An empty file means
// "no particular place" (e.g. a rule about the cluster given on the command
// line); line 0 means "the file as a whole".
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;

  std::string str() const;  // "file:line:col", "file" or "<command line>"
  friend bool operator==(const SourceLocation&, const SourceLocation&) = default;
};

enum class Severity { error, warning, note };

const char* severity_name(Severity severity);

struct Diagnostic {
  Severity severity = Severity::error;
  SourceLocation where;
  std::string rule;        // stable id, e.g. "schema.unknown-key"
  std::string message;     // what is wrong, with the offending values
  std::string suggestion;  // how to fix it; may be empty
};

// "file:line:col: error: message [rule]" plus an indented "help:" line.
std::string format_diagnostic(const Diagnostic& diagnostic);

class Diagnostics {
 public:
  void add(Diagnostic diagnostic);
  void error(SourceLocation where, std::string rule, std::string message,
             std::string suggestion = {});
  void warning(SourceLocation where, std::string rule, std::string message,
               std::string suggestion = {});
  void append(const Diagnostics& other);

  bool has_errors() const;
  int error_count() const;
  int warning_count() const;
  bool empty() const { return items_.empty(); }
  const std::vector<Diagnostic>& items() const { return items_; }
  // Stable sort by (file, line, column); ties keep the order of reporting.
  std::vector<Diagnostic> sorted() const;
  // Every diagnostic formatted, in sorted order, each ending with '\n'.
  std::string format() const;

 private:
  std::vector<Diagnostic> items_;
};

// Thrown where a caller cannot continue (e.g. a plan was asked for an invalid
// recipe); carries the diagnostics that explain why.
class DiagnosticError : public KindError<ErrorKind::config> {
 public:
  explicit DiagnosticError(Diagnostics diagnostics);
  const Diagnostics& diagnostics() const { return diagnostics_; }

 private:
  Diagnostics diagnostics_;
};

}  // namespace meshrun
