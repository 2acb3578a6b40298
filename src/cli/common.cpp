#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <spdlog/spdlog.h>

#include "commands.hpp"
#include "meshrun/lint/lint.hpp"
#include "meshrun/recipe/suggest.hpp"

namespace meshrun::cli {

std::vector<Override> CommonOptions::overrides() const {
  std::vector<Override> out;
  for (const auto& set : sets) out.push_back(Override{set});
  return out;
}

bool lint_for_command(const std::string& recipe_path, const CommonOptions& common, const char* nothing,
                      LintReport& report) {
  report = lint_recipe(recipe_path, common.overrides());
  const std::string text = report.diagnostics.format();
  std::fwrite(text.data(), 1, text.size(), stderr);
  if (report.ok() && report.plan) return true;
  spdlog::error("{} is not valid: {} error(s); {}", recipe_path, report.diagnostics.error_count(), nothing);
  return false;
}

std::vector<std::string> with_default_subcommand(std::vector<std::string> args,
                                                 const std::vector<std::string>& subcommands,
                                                 const std::vector<std::string>& options_with_values) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") return args;
    if (!arg.empty() && arg[0] == '-') {
      bool takes_value = std::find(options_with_values.begin(), options_with_values.end(), arg) !=
                         options_with_values.end();
      if (takes_value) ++i;
      continue;
    }
    if (std::find(subcommands.begin(), subcommands.end(), arg) == subcommands.end())
      args.insert(args.begin() + static_cast<long>(i), "run");
    return args;
  }
  return args;
}

std::optional<std::pair<std::string, std::string>> mistyped_subcommand(
    const std::vector<std::string>& args, const std::vector<std::string>& subcommands,
    const std::vector<std::string>& options_with_values) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") return std::nullopt;
    if (!arg.empty() && arg[0] == '-') {
      if (std::find(options_with_values.begin(), options_with_values.end(), arg) != options_with_values.end()) ++i;
      continue;
    }
    std::error_code ec;
    if (std::find(subcommands.begin(), subcommands.end(), arg) != subcommands.end() ||
        arg.find_first_of("./") != std::string::npos || std::filesystem::exists(arg, ec))
      return std::nullopt;
    if (auto nearest = closest_match(arg, subcommands)) return std::pair{arg, *nearest};
    return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace meshrun::cli
