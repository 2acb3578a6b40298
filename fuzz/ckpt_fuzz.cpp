// Feeds manifest.json files, and the same bytes as a rank file's shard map,
// to their parsers; what parses must round-trip through to_json(), and a
// manifest is then verified, chosen and rotated in a checkpoint directory.
// Expected: CheckpointError; finding: anything else (fuzz_support.hpp).
#include <filesystem>

#include "fuzz_support.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/ckpt/shard_map.hpp"
#include "meshrun/error.hpp"

using namespace meshrun;

namespace {

bool same(const CheckpointManifest& a, const CheckpointManifest& b) {
  if (a.format_version != b.format_version || a.global_step != b.global_step || a.algorithm != b.algorithm ||
      a.recipe_hash != b.recipe_hash || a.layout != b.layout || a.files.size() != b.files.size())
    return false;
  for (size_t i = 0; i < a.files.size(); ++i)
    if (a.files[i].name != b.files[i].name || a.files[i].bytes != b.files[i].bytes || a.files[i].xxh3 != b.files[i].xxh3)
      return false;
  return true;
}

void manifest(std::string_view text) {
  CheckpointManifest parsed;
  try {
    parsed = CheckpointManifest::from_json(std::string(text), "manifest.json");
  } catch (const Error&) {
    return;
  }
  (void)parsed.total_bytes();
  if (!same(parsed, CheckpointManifest::from_json(parsed.to_json(), "manifest.json (again)"))) __builtin_trap();

  // A checkpoint directory holding it, with one real file beside it.
  const std::filesystem::path root = fuzz::scratch_dir() / "checkpoints";
  std::error_code ignored;
  std::filesystem::remove_all(root, ignored);
  const CheckpointDir dir(root.string());
  fuzz::write_file(std::filesystem::path(dir.final_path(7)) / "manifest.json", text);
  fuzz::write_file(std::filesystem::path(dir.final_path(7)) / "rank_0.safetensors", "weights");
  (void)dir.verify(7);
  for (const auto& file : parsed.files) (void)dir.verify_file(7, file.name);
  std::vector<std::string> warnings;
  try {
    (void)dir.choose("auto", warnings);
    (void)dir.choose("require", warnings);
  } catch (const Error&) {
  }
  fuzz::write_file(std::filesystem::path(dir.final_path(9)) / "manifest.json", text);
  (void)dir.rotate(1, 1);
}

void shard_map(std::string_view text) {
  ShardMap parsed;
  try {
    parsed = ShardMap::from_json(text, "rank_0.safetensors");
  } catch (const Error&) {
    return;
  }
  const ShardMap again = ShardMap::from_json(parsed.to_json(), "rank_0.safetensors (again)");
  if (again.to_json() != parsed.to_json()) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = fuzz::as_text(data, size);
  manifest(text);
  shard_map(text);
  return 0;
}
