// The batch script of `meshrun submit --slurm`. Two quoting languages meet
// in it: #SBATCH lines are read by sbatch's own parser (whitespace splits
// words, "..." groups them, a backslash escapes one character, an unescaped
// '#' starts a comment, and older versions also end a word at '#' inside
// quotes), and the srun line is read by bash.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "meshrun/launch/launcher.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"

namespace meshrun {
namespace {

// `recipe_key`: the recipe key the value comes from, when it does.
void reject_unrepresentable(std::string_view what, std::string_view value, const std::string& recipe_key = {}) {
  for (const char c : value)
    if (c == '\n' || c == '\r' || c == '\0')
      throw ConfigError(
          fmt::format("{} cannot go into a batch script: it holds a line break or NUL: '{}'", what, value), recipe_key);
}

// A value for an #SBATCH option, as sbatch's parser reads it back.
std::string sbatch_value(std::string_view what, std::string_view value, const std::string& recipe_key) {
  reject_unrepresentable(what, value, recipe_key);
  std::string escaped;
  bool has_space = false;
  for (const char c : value) {
    if (c == '\\' || c == '"' || c == '\'' || c == '#') escaped += '\\';
    has_space |= c == ' ' || c == '\t' || c == '\v' || c == '\f';
    escaped += c;
  }
  return has_space ? '"' + escaped + '"' : escaped;
}

std::string sbatch_line(std::string_view option, std::string_view what, std::string_view value,
                        const std::string& recipe_key = {}) {
  return fmt::format("#SBATCH --{}={}\n", option, sbatch_value(what, value, recipe_key));
}

// The default log file name: the recipe name without characters that mean
// something in a path or in SLURM's filename patterns ('/', '%').
std::string log_file_stem(const std::string& name) {
  std::string stem;
  for (const char c : name)
    stem += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  return stem.empty() || stem.find_first_not_of('.') == std::string::npos ? "meshrun" : stem;
}

struct JobOverride {
  std::string assignment;  // "launch.type=slurm"
  std::string reason;
};

// What the job must change in the recipe so that each task sees the world
// this script asks SLURM for: the planned cluster may differ from the
// recipe's [launch] (`--cluster`), and under srun only SLURM's variables
// describe the tasks ("local" would make each of them a world of one).
std::vector<JobOverride> job_overrides(const Recipe& recipe, const ClusterShape& cluster) {
  std::vector<JobOverride> overrides;
  const auto& launch = recipe.launch;
  if (launch.type != "slurm" && launch.type != "auto")
    overrides.push_back({"launch.type=slurm", fmt::format("the recipe's launch.type is \"{}\"", launch.type)});
  if (launch.nodes != cluster.nodes)
    overrides.push_back({fmt::format("launch.nodes={}", cluster.nodes),
                         fmt::format("the recipe's launch.nodes is {}", launch.nodes)});
  if (launch.procs_per_node != cluster.procs_per_node)
    overrides.push_back({fmt::format("launch.procs_per_node={}", cluster.procs_per_node),
                         fmt::format("the recipe's launch.procs_per_node is {}", launch.procs_per_node)});
  if (launch.device != setting_name(cluster.device))
    overrides.push_back({"launch.device=" + std::string(setting_name(cluster.device)),
                         fmt::format("the recipe's launch.device is \"{}\"", launch.device)});
  return overrides;
}

}  // namespace

std::string shell_quote(const std::string& word) {
  constexpr std::string_view kPlain =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_@%+=:,./-";
  if (!word.empty() && word.find_first_not_of(kPlain) == std::string::npos) return word;
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

std::string make_sbatch_script(const Recipe& recipe, const Plan& plan, const SbatchOptions& options) {
  if (options.meshrun_binary.empty()) throw std::logic_error("the batch script needs the path of meshrun");
  if (options.recipe_path.empty()) throw std::logic_error("the batch script needs the recipe's path");
  const auto& cluster = plan.cluster;

  std::string script = "#!/bin/bash\n";
  script += sbatch_line("job-name", "the recipe name", recipe.name.empty() ? "meshrun" : recipe.name, "name");
  script += fmt::format("#SBATCH --nodes={}\n", cluster.nodes);
  script += fmt::format("#SBATCH --ntasks-per-node={}\n", cluster.procs_per_node);
  if (cluster.device == DeviceKind::cuda) script += fmt::format("#SBATCH --gpus-per-node={}\n", cluster.procs_per_node);
  if (options.partition) script += sbatch_line("partition", "the partition", *options.partition);
  if (options.account) script += sbatch_line("account", "the account", *options.account);
  if (options.time) script += sbatch_line("time", "the time limit", *options.time);
  script += sbatch_line("output", "the output path",
                        options.output.empty() ? log_file_stem(recipe.name) + "-%j.out" : options.output);

  std::vector<std::string> words = {options.meshrun_binary, "run", options.recipe_path};
  for (const auto& set : options.sets) words.insert(words.end(), {"--set", set});
  const auto overrides = job_overrides(recipe, cluster);
  for (const auto& item : overrides) words.insert(words.end(), {"--set", item.assignment});
  for (const auto& word : words) reject_unrepresentable("an argument", word);

  script += fmt::format("\n# Generated by `meshrun submit --slurm` from {}: {} node(s) x {} {} process(es).\n",
                        options.recipe_path, cluster.nodes, cluster.procs_per_node, setting_name(cluster.device));
  for (const auto& item : overrides) script += "# --set " + item.assignment + ": " + item.reason + "\n";
  script += "set -euo pipefail\n\n";
  // block: the ranks of a node are consecutive, as the plan assumes.
  // kill-on-bad-exit: one failed task ends the step instead of leaving the
  // others blocked in a collective until their timeout.
  script += "srun --kill-on-bad-exit=1 --distribution=block";
  for (const auto& word : words) script += " " + shell_quote(word);
  script += "\n";
  return script;
}

void write_sbatch_script(const std::string& path, const std::string& script) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const auto folder = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  std::string temporary = (folder / ("." + target.filename().string() + ".XXXXXX")).string();
  const int fd = ::mkstemp(temporary.data());
  if (fd < 0)
    throw KindError<ErrorKind::io>(
        fmt::format("cannot create a file in {}: {}", folder.string(), std::strerror(errno)));
  const auto fail = [&](const std::string& doing) {
    const int error = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    throw KindError<ErrorKind::io>(fmt::format("cannot write {}: {} failed: {}", path, doing, std::strerror(error)));
  };
  for (std::size_t written = 0; written < script.size();) {
    const ssize_t n = ::write(fd, script.data() + written, script.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write");
    written += static_cast<std::size_t>(n);
  }
  if (::fchmod(fd, 0755) != 0) fail("chmod");
  if (::fsync(fd) != 0) fail("fsync");
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw KindError<ErrorKind::io>(fmt::format("cannot write {}: close failed: {}", path, std::strerror(error)));
  }
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    throw KindError<ErrorKind::io>(fmt::format("cannot write {}: rename failed: {}", path, std::strerror(error)));
  }
}

}  // namespace meshrun
