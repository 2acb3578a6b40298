#include "meshrun/recipe/diagnostics.hpp"

#include <algorithm>
#include <tuple>

namespace meshrun {

std::string SourceLocation::str() const {
  if (file.empty()) return "<command line>";
  if (line <= 0) return file;
  if (column <= 0) return file + ":" + std::to_string(line);
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

const char* severity_name(Severity severity) {
  switch (severity) {
    case Severity::error: return "error";
    case Severity::warning: return "warning";
    case Severity::note: return "note";
  }
  return "error";
}

std::string format_diagnostic(const Diagnostic& d) {
  std::string out = d.where.str() + ": " + severity_name(d.severity) + ": " + d.message;
  if (!d.rule.empty()) out += " [" + d.rule + "]";
  out += "\n";
  if (!d.suggestion.empty()) out += "  help: " + d.suggestion + "\n";
  return out;
}

void Diagnostics::add(Diagnostic diagnostic) { items_.push_back(std::move(diagnostic)); }

void Diagnostics::error(SourceLocation where, std::string rule, std::string message,
                        std::string suggestion) {
  add({Severity::error, std::move(where), std::move(rule), std::move(message),
       std::move(suggestion)});
}

void Diagnostics::warning(SourceLocation where, std::string rule, std::string message,
                          std::string suggestion) {
  add({Severity::warning, std::move(where), std::move(rule), std::move(message),
       std::move(suggestion)});
}

void Diagnostics::append(const Diagnostics& other) {
  items_.insert(items_.end(), other.items_.begin(), other.items_.end());
}

bool Diagnostics::has_errors() const { return error_count() > 0; }

int Diagnostics::error_count() const {
  return static_cast<int>(std::count_if(items_.begin(), items_.end(), [](const Diagnostic& d) {
    return d.severity == Severity::error;
  }));
}

int Diagnostics::warning_count() const {
  return static_cast<int>(std::count_if(items_.begin(), items_.end(), [](const Diagnostic& d) {
    return d.severity == Severity::warning;
  }));
}

std::vector<Diagnostic> Diagnostics::sorted() const {
  std::vector<Diagnostic> out = items_;
  std::stable_sort(out.begin(), out.end(), [](const Diagnostic& a, const Diagnostic& b) {
    return std::tie(a.where.file, a.where.line, a.where.column) <
           std::tie(b.where.file, b.where.line, b.where.column);
  });
  return out;
}

std::string Diagnostics::format() const {
  std::string out;
  for (const auto& d : sorted()) out += format_diagnostic(d);
  return out;
}

DiagnosticError::DiagnosticError(Diagnostics diagnostics)
    : KindError(diagnostics.format()), diagnostics_(std::move(diagnostics)) {}

}  // namespace meshrun
