#include "folder_confinement.hpp"

#include <algorithm>
#include <system_error>

namespace meshrun::hooks_detail {
namespace {

namespace fs = std::filesystem;

bool is_within(const fs::path& folder, const fs::path& path) {
  auto [folder_stop, path_stop] =
      std::mismatch(folder.begin(), folder.end(), path.begin(), path.end());
  return folder_stop == folder.end();
}

// Same bound as the kernel's, so a cycle of links cannot keep us looping.
constexpr int most_symlink_hops = 40;

std::optional<fs::path> resolve_links(const fs::path& lexical, std::string& refusal) {
  std::error_code error;
  fs::path resolved = fs::weakly_canonical(lexical, error);
  if (error) {
    refusal = "cannot be resolved (" + error.message() + ")";
    return std::nullopt;
  }
  // weakly_canonical treats a dangling link as a plain missing name; follow it
  // by hand so that a link pointing outside is caught before fopen creates
  // its target.
  for (int hop = 0;; ++hop) {
    fs::file_status status = fs::symlink_status(resolved, error);
    if (error || !fs::is_symlink(status)) return resolved;
    if (hop == most_symlink_hops) {
      refusal = "goes through too many symbolic links";
      return std::nullopt;
    }
    fs::path target = fs::read_symlink(resolved, error);
    if (error) {
      refusal = "cannot be resolved (" + error.message() + ")";
      return std::nullopt;
    }
    resolved = fs::weakly_canonical(target.is_absolute() ? target : resolved.parent_path() / target,
                                    error);
    if (error) {
      refusal = "cannot be resolved (" + error.message() + ")";
      return std::nullopt;
    }
  }
}

}  // namespace

std::optional<fs::path> confine_to_folder(const fs::path& folder, std::string_view requested,
                                          std::string& refusal) {
  if (requested.empty()) {
    refusal = "is an empty path";
    return std::nullopt;
  }
  if (requested.find('\0') != std::string_view::npos) {
    refusal = "contains a NUL byte";
    return std::nullopt;
  }
  fs::path asked(requested);
  fs::path lexical = (asked.is_absolute() ? asked : folder / asked).lexically_normal();
  if (!is_within(folder, lexical)) {
    refusal = "is outside the script folder " + folder.string();
    return std::nullopt;
  }
  std::optional<fs::path> resolved = resolve_links(lexical, refusal);
  if (!resolved) return std::nullopt;
  if (!is_within(folder, *resolved)) {
    refusal = "leads outside the script folder " + folder.string() + " through a symbolic link";
    return std::nullopt;
  }
  return resolved;
}

}  // namespace meshrun::hooks_detail
