// Internal to the hooks subsystem: the rule that a sandboxed script may only
// touch files inside its own folder. A requested path is taken relative to
// that folder (not the process's working directory), normalised lexically,
// then resolved through symbolic links (dangling ones included, since
// opening one for writing would create its target); both forms must stay
// inside the folder. The resolved path is the one to open.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace meshrun::hooks_detail {

// `folder` must be absolute and canonical. On refusal returns nullopt and
// sets `refusal` to a phrase that completes "io.open('x') ...".
std::optional<std::filesystem::path> confine_to_folder(const std::filesystem::path& folder,
                                                       std::string_view requested,
                                                       std::string& refusal);

}  // namespace meshrun::hooks_detail
