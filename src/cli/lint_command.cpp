// `meshrun lint RECIPE...`: every problem of every recipe, then a summary.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "engine.hpp"
#include "meshrun/lint/lint.hpp"

namespace meshrun::cli {
namespace {

std::string plural(int count, const char* word) {
  return std::to_string(count) + " " + word + (count == 1 ? "" : "s");
}

nlohmann::json diagnostic_json(const Diagnostic& d) {
  return {{"severity", severity_name(d.severity)}, {"file", d.where.file},    {"line", d.where.line},
          {"column", d.where.column},              {"rule", d.rule},          {"message", d.message},
          {"suggestion", d.suggestion}};
}

}  // namespace

int lint_command(const std::vector<std::string>& recipes, const CommonOptions& common,
                 const std::string& format) {
  int failed = 0, errors = 0, warnings = 0;
  nlohmann::json results = nlohmann::json::array();
  for (const auto& path : recipes) {
    LintOptions options;
    Diagnostics ignored;
    if (auto recipe = load_recipe(path, common.overrides(), ignored))
      options.visible_memory_gb = visible_gpu_memory_gb(*recipe);
    LintReport report = lint_recipe(path, common.overrides(), options);
    const Diagnostics& diagnostics = report.diagnostics;
    errors += diagnostics.error_count();
    warnings += diagnostics.warning_count();
    if (!report.ok()) ++failed;
    if (format == "json") {
      nlohmann::json items = nlohmann::json::array();
      for (const auto& d : diagnostics.sorted()) items.push_back(diagnostic_json(d));
      results.push_back({{"recipe", path}, {"ok", report.ok()}, {"diagnostics", items}});
      continue;
    }
    std::string text = diagnostics.format();
    if (report.ok()) {
      text += path + ": ok" +
              (diagnostics.warning_count() ? " (" + plural(diagnostics.warning_count(), "warning") + ")" : "") + "\n";
    } else {
      text += path + ": " + plural(diagnostics.error_count(), "error") +
              (diagnostics.warning_count() ? ", " + plural(diagnostics.warning_count(), "warning") : "") + "\n";
    }
    // By size: a NUL in quoted user text must not end the output.
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  if (format == "json") {
    // Replacing invalid UTF-8 (a file name, a data line) instead of throwing.
    const std::string json = nlohmann::json{{"recipes", results}, {"errors", errors}, {"warnings", warnings}}.dump(
        2, ' ', false, nlohmann::json::error_handler_t::replace);
    std::fwrite(json.data(), 1, json.size(), stdout);
    std::fputc('\n', stdout);
  } else if (recipes.size() > 1) {
    std::printf("%s checked: %d ok, %d failed (%s, %s)\n", plural(static_cast<int>(recipes.size()), "recipe").c_str(),
                static_cast<int>(recipes.size()) - failed, failed, plural(errors, "error").c_str(),
                plural(warnings, "warning").c_str());
  }
  return failed ? kFailed : kOk;
}

}  // namespace meshrun::cli
