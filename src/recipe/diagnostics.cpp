#include "meshrun/recipe/diagnostics.hpp"

#include <algorithm>
#include <string_view>
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

namespace {

// Messages quote user text (keys, values, file names) that may hold any
// byte: control characters are written as \xNN so that none reaches the
// terminal raw (ESC sequences) or cuts the output (NUL), and a line break
// continues indented, so that no quoted text reads as a diagnostic of its own.
std::string printable(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const bool c1_control = byte == 0xC2 && i + 1 < text.size() &&
                            static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                            static_cast<unsigned char>(text[i + 1]) <= 0x9F;  // U+0080..U+009F
    if (byte == '\n') {
      out += "\n    ";
    } else if (c1_control) {
      const auto code = static_cast<unsigned char>(text[++i]);
      out += std::string("\\u00") + kHex[code >> 4] + kHex[code & 0xF];
    } else if ((byte < 0x20 && byte != '\t') || byte == 0x7F) {
      out += std::string("\\x") + kHex[byte >> 4] + kHex[byte & 0xF];
    } else {
      out += static_cast<char>(byte);
    }
  }
  return out;
}

}  // namespace

std::string format_diagnostic(const Diagnostic& d) {
  std::string out = d.where.str() + ": " + severity_name(d.severity) + ": " + d.message;
  if (!d.rule.empty()) out += " [" + d.rule + "]";
  out = printable(out) + "\n";
  if (!d.suggestion.empty()) out += "  help: " + printable(d.suggestion) + "\n";
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
