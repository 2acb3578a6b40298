// `meshrun ckpt inspect PATH`: the checkpoints under a checkpoint root (or
// the one checkpoint directory given), each verified: step, size, files,
// layout, and whether every file has its recorded size and checksum.
// Partial checkpoints left by an interrupted save are listed as such. Exit
// status 1 when a checkpoint fails verification or none is found.
#include <cstdio>
#include <filesystem>

#include <fmt/format.h>

#include "commands.hpp"
#include "meshrun/ckpt/checkpoint.hpp"

namespace meshrun::cli {

namespace fs = std::filesystem;

int ckpt_inspect_command(const std::string& path) {
  fs::path target = fs::absolute(path).lexically_normal();
  if (target.has_filename() == false) target = target.parent_path();
  std::vector<int64_t> steps;
  std::string root = target.string();
  if (auto single = as_checkpoint(target)) {
    root = single->first;
    steps = {single->second};
  } else if (fs::is_directory(target)) {
    steps = CheckpointDir(root).complete_steps();
  } else {
    std::fprintf(stderr, "meshrun ckpt inspect: %s is neither a checkpoint nor a folder of checkpoints\n", path.c_str());
    return kFailed;
  }
  const CheckpointDir dir(root);
  int bad = 0;
  for (int64_t step : steps) {
    const std::string problem = dir.verify(step);
    std::fputs(fmt::format("{}  {}\n", dir.final_path(step), problem.empty() ? "ok" : "FAILED: " + problem).c_str(), stdout);
    if (!problem.empty()) {
      ++bad;
      continue;
    }
    const CheckpointManifest manifest = dir.manifest(step);
    std::fputs(fmt::format("  step {}, {} ({}), {} files, {:.1f} MB\n  layout: {}\n", manifest.global_step,
                           manifest.algorithm, manifest.recipe_hash.empty() ? "no recipe hash" : "recipe " + manifest.recipe_hash,
                           manifest.files.size(), static_cast<double>(manifest.total_bytes()) / 1e6, manifest.layout)
                   .c_str(),
               stdout);
    for (const auto& file : manifest.files)
      std::fputs(fmt::format("    {:<40} {:>12} bytes  xxh3 {}\n", file.name, file.bytes, file.xxh3).c_str(), stdout);
  }
  if (steps.size() != 1 || !as_checkpoint(target)) {
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(root, error))
      if (entry.path().filename().string().rfind(".partial-global_step_", 0) == 0)
        std::fputs(fmt::format("{}  partial (an interrupted save; removed at the next start)\n", entry.path().string()).c_str(),
                   stdout);
  }
  if (steps.empty()) {
    std::fprintf(stderr, "meshrun ckpt inspect: no complete checkpoint in %s\n", root.c_str());
    return kFailed;
  }
  return bad == 0 ? kOk : kFailed;
}

}  // namespace meshrun::cli
