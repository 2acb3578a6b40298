// Hugging Face hub names in the local cache (include/meshrun/arch/hub_cache.hpp).
#include "meshrun/arch/hub_cache.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "meshrun/error.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
         c == '.';
}

bool valid_part(std::string_view part) {
  return !part.empty() && part.size() <= 96 && part != "." && part != ".." &&
         std::all_of(part.begin(), part.end(), name_char);
}

bool is_commit_hash(std::string_view text) {
  return text.size() == 40 && std::all_of(text.begin(), text.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

// The first line of a ref file (a commit hash), bounded: a ref is 40 bytes.
// Read like every user file (read_bounded): a FIFO in its place is refused, not waited on.
std::optional<std::string> read_ref(const fs::path& file) {
  const BoundedText read = read_bounded(file.string(), 4096);
  if (!read.ok()) return std::nullopt;
  std::string line = read.text.substr(0, read.text.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

}  // namespace

std::optional<HubName> parse_hub_name(std::string_view text) {
  if (text.rfind("builtin:", 0) == 0) return std::nullopt;
  HubName hub;
  std::string_view repo = text;
  if (const size_t at = text.find('@'); at != std::string_view::npos) {
    repo = text.substr(0, at);
    const std::string_view revision = text.substr(at + 1);
    if (revision.empty() || revision.size() > 255 ||
        !std::all_of(revision.begin(), revision.end(), [](char c) { return name_char(c) || c == '/'; }) ||
        revision.find("..") != std::string_view::npos)
      return std::nullopt;
    hub.revision = std::string(revision);
  }
  const size_t slash = repo.find('/');
  if (slash == std::string_view::npos || repo.find('/', slash + 1) != std::string_view::npos) return std::nullopt;
  if (!valid_part(repo.substr(0, slash)) || !valid_part(repo.substr(slash + 1))) return std::nullopt;
  hub.org = std::string(repo.substr(0, slash));
  hub.name = std::string(repo.substr(slash + 1));
  return hub;
}

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value || !*value) return std::nullopt;
    return std::string(value);
  };
}

std::string hub_cache_root(const EnvLookup& env) {
  if (auto cache = env("HF_HUB_CACHE")) return *cache;
  if (auto home = env("HF_HOME")) return (fs::path(*home) / "hub").string();
  if (auto xdg = env("XDG_CACHE_HOME")) return (fs::path(*xdg) / "huggingface" / "hub").string();
  return (fs::path(env("HOME").value_or("/root")) / ".cache" / "huggingface" / "hub").string();
}

std::string SourceResolution::describe() const {
  return from_hub ? original + " → " + path : path;
}

SourceResolution resolve_source(const std::string& text, HubRepoType type, const EnvLookup& env) {
  SourceResolution out;
  out.original = text;
  out.path = text;
  std::error_code ec;
  if (fs::exists(text, ec)) return out;
  const std::optional<HubName> hub = parse_hub_name(text);
  if (!hub) return out;
  const char* kind = type == HubRepoType::model ? "models" : "datasets";
  const fs::path repo = fs::path(hub_cache_root(env)) / (std::string(kind) + "--" + hub->org + "--" + hub->name);
  const std::string download = std::string("fetch it with `huggingface-cli download ") +
                               (type == HubRepoType::dataset ? "--repo-type dataset " : "") + hub->repo_id() +
                               (hub->revision != "main" ? " --revision " + hub->revision : "") + "` (meshrun never downloads)";
  out.path.clear();
  if (!fs::is_directory(repo, ec)) {
    out.error = hub->repo_id() + " is not in the local Hugging Face cache (no " + repo.string() + "); " + download;
    return out;
  }
  std::string commit = hub->revision;
  if (!is_commit_hash(commit)) {
    const fs::path ref = repo / "refs" / hub->revision;
    const std::optional<std::string> target = read_ref(ref);
    if (!target) {
      out.error = hub->repo_id() + "@" + hub->revision + " has no ref in the local Hugging Face cache (no " +
                  ref.string() + "); " + download;
      return out;
    }
    if (!is_commit_hash(*target)) {
      out.error = "the ref " + ref.string() + " does not hold a commit hash";
      return out;
    }
    commit = *target;
  }
  const fs::path snapshot = repo / "snapshots" / commit;
  if (!fs::is_directory(snapshot, ec)) {
    out.error = hub->repo_id() + "@" + hub->revision + " points at commit " + commit +
                ", whose snapshot is missing from the local Hugging Face cache (no " + snapshot.string() +
                ": a dangling ref); " + download;
    return out;
  }
  out.path = snapshot.string();
  out.from_hub = true;
  return out;
}

SourceResolution resolve_data_file(const std::string& text, const EnvLookup& env) {
  SourceResolution out = resolve_source(text, HubRepoType::dataset, env);
  if (!out.from_hub) return out;
  // The snapshot's JSON/JSONL files, at most a few levels down and a bounded
  // number of entries: a snapshot is a folder of symlinks into blobs/.
  std::vector<std::string> files;
  std::string parquet;  // the first Parquet file seen: the hub's own conversion of most datasets
  std::error_code ec;
  int visited = 0;
  for (fs::recursive_directory_iterator it(out.path, fs::directory_options::follow_directory_symlink, ec), end;
       !ec && it != end && visited < 10000; it.increment(ec), ++visited) {
    if (it.depth() > 4) {
      it.disable_recursion_pending();
      continue;
    }
    const std::string extension = it->path().extension().string();
    if ((extension == ".jsonl" || extension == ".json") && fs::is_regular_file(it->path(), ec))
      files.push_back(fs::relative(it->path(), out.path, ec).string());
    if (extension == ".parquet" && parquet.empty()) parquet = fs::relative(it->path(), out.path, ec).string();
  }
  std::sort(files.begin(), files.end());
  if (files.size() == 1) {
    out.path = (fs::path(out.path) / files.front()).string();
    return out;
  }
  std::string listed;
  for (size_t i = 0; i < files.size() && i < 10; ++i) listed += (i ? ", " : "") + files[i];
  const std::string convert =
      parquet.empty() ? ""
                      : " (only Parquet files such as " + parquet +
                            ", which meshrun does not read: convert one to JSON Lines, e.g. " +
                            kParquetToJsonlCommand + ", and name the .jsonl file)";
  out.error = files.empty() ? "the dataset " + text + " (" + out.path + ") holds no .json or .jsonl file" + convert
                            : "the dataset " + text + " (" + out.path + ") holds " + std::to_string(files.size()) +
                                  " JSON/JSONL files (" + listed +
                                  "): name one by its path in the snapshot instead";
  out.path.clear();
  out.from_hub = false;
  return out;
}

}  // namespace meshrun
