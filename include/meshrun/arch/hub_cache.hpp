// Hugging Face hub names, resolved offline in the local cache that
// huggingface_hub fills (`huggingface-cli download`, transformers): a model
// or dataset named `org/name` or `org/name@revision` is the snapshot folder
// the cache's ref points at. Nothing is ever downloaded.
//
// The cache root is HF_HUB_CACHE, else HF_HOME/hub, else
// XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. In it a
// repository is `models--org--name` (`datasets--org--name`), its revisions
// are `refs/<branch or tag>` files holding a commit hash, and its files are
// under `snapshots/<commit>/`. A revision that is a full commit hash names
// its snapshot directly; without a revision it is "main".
//
// A text that exists as a local path, or a `builtin:` preset, is never a hub
// name: local paths win, so a folder called org/name in the working
// directory is used as it is.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace meshrun {

enum class HubRepoType { model, dataset };

struct HubName {
  std::string org, name;
  std::string revision = "main";
  std::string repo_id() const { return org + "/" + name; }
};

// `org/name` or `org/name@revision` (letters, digits, '-', '_', '.'; a
// revision may also hold '/'), else nullopt.
std::optional<HubName> parse_hub_name(std::string_view text);

// Reads an environment variable (nullopt when unset); tests pass their own.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// The cache root by the rules above.
std::string hub_cache_root(const EnvLookup& env = process_env());

// Where a model or dataset argument points.
struct SourceResolution {
  std::string path;  // what to open: the text itself, or the snapshot folder
  bool from_hub = false;  // resolved in the hub cache
  std::string error;      // a hub name not in the cache (path empty), naming where it looked
  std::string describe() const;  // "org/name@main → /root/.cache/.../snapshots/abc" or the path
  std::string original;
};

// A local path or `builtin:` text as it is; a hub name (not a local path)
// to its snapshot folder, or an error naming the cache folder it looked in
// (a missing repository, a missing or dangling ref).
SourceResolution resolve_source(const std::string& text, HubRepoType type, const EnvLookup& env = process_env());

// The command a message suggests for turning a Parquet (or, with
// pd.read_feather, Arrow) data file into the JSON Lines meshrun reads; IN
// and OUT stand for the paths.
inline constexpr const char* kParquetToJsonlCommand =
    "python3 -c \"import pandas as pd; pd.read_parquet('IN').to_json('OUT.jsonl', orient='records', lines=True, "
    "force_ascii=False)\"";

// For data files: a hub dataset resolves to its snapshot's one JSON or
// JSONL file (an error lists them when there are several, or says there is
// none); a local path or a hub name that is not a dataset is left as it is.
SourceResolution resolve_data_file(const std::string& text, const EnvLookup& env = process_env());

}  // namespace meshrun
