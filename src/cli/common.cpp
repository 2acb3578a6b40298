#include <algorithm>

#include "commands.hpp"

namespace meshrun::cli {

std::vector<Override> CommonOptions::overrides() const {
  std::vector<Override> out;
  for (const auto& set : sets) out.push_back(Override{set});
  return out;
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

}  // namespace meshrun::cli
