// Checkpoint directories: commit makes a complete checkpoint with a
// manifest, partial ones are ignored and cleaned up, verification catches
// missing, truncated and corrupted files, rotation keeps the newest, and
// the load policies choose the newest checkpoint that verifies.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "meshrun/ckpt/checkpoint.hpp"
#include "support/temp_dir.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// A committed checkpoint at `step` with two rank files and a nested one.
CheckpointManifest save(const CheckpointDir& dir, int64_t step, size_t bytes = 100) {
  const fs::path partial = dir.begin(step);
  write(partial / "rank-0.bin", std::string(bytes, 'a'));
  write(partial / "rank-1.bin", std::string(bytes, 'b'));
  write(partial / "hf/config.json", "{}");
  CheckpointManifest info;
  info.algorithm = "sft";
  info.recipe_hash = "abc";
  info.layout = "world 2; actor dp 2 tp 1 zero 0";
  return dir.commit(step, info);
}

}  // namespace

TEST_CASE("commit seals a partial directory into global_step_N with a manifest of every file") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  const CheckpointManifest manifest = save(dir, 4);
  CHECK(fs::is_directory(dir.final_path(4)));
  CHECK_FALSE(fs::exists(dir.partial_path(4)));
  REQUIRE(manifest.files.size() == 3);
  CHECK(manifest.files[0].name == "hf/config.json");
  CHECK(manifest.files[1].name == "rank-0.bin");
  CHECK(manifest.files[1].bytes == 100);
  CHECK(manifest.files[1].xxh3.size() == 16);
  CHECK(manifest.total_bytes() == 202);
  const CheckpointManifest read = dir.manifest(4);
  CHECK(read.global_step == 4);
  CHECK(read.layout == "world 2; actor dp 2 tp 1 zero 0");
  CHECK(read.files.size() == 3);
  CHECK(dir.verify(4).empty());
  CHECK(dir.complete_steps() == std::vector<int64_t>{4});
}

TEST_CASE("a file name that is not UTF-8 makes commit refuse, naming it, and keeps the partial") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  save(dir, 2);
  const fs::path partial = dir.begin(4);
  std::ofstream(partial / "weights.bin") << "abc";
  std::ofstream(partial / "stray\xff\xfe.bin") << "x";
  CHECK_THROWS_WITH_AS(dir.commit(4, CheckpointManifest{}),
                       doctest::Contains("the file name \"stray\xef\xbf\xbd\xef\xbf\xbd.bin\" is not UTF-8"),
                       CheckpointError);
  CHECK(fs::exists(partial / "weights.bin"));
  CHECK_FALSE(fs::exists(dir.final_path(4)));
  CHECK(dir.complete_steps() == std::vector<int64_t>{2});
  CHECK(dir.verify(2).empty());
}

TEST_CASE("a partial checkpoint is not a checkpoint, and remove_partials cleans it up") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  save(dir, 2);
  const fs::path partial = dir.begin(6);
  write(partial / "rank-0.bin", "half");
  // A crash after the rename of some files but before the manifest.
  fs::create_directories(dir.final_path(8));
  CHECK(dir.complete_steps() == std::vector<int64_t>{2});
  CHECK(dir.remove_partials() == std::vector<std::string>{".partial-global_step_6"});
  CHECK_FALSE(fs::exists(partial));
  std::vector<std::string> warnings;
  CHECK(dir.choose("auto", warnings) == 2);
}

TEST_CASE("verification names a missing, truncated or corrupted file") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  save(dir, 1);
  save(dir, 2);
  save(dir, 3);
  fs::remove(fs::path(dir.final_path(1)) / "rank-1.bin");
  CHECK(dir.verify(1).find("rank-1.bin is missing") != std::string::npos);
  fs::resize_file(fs::path(dir.final_path(2)) / "rank-0.bin", 50);
  CHECK(dir.verify(2).find("rank-0.bin has 50 bytes, the manifest says 100") != std::string::npos);
  {
    std::fstream file(fs::path(dir.final_path(3)) / "rank-0.bin", std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(10);
    file.put('z');
  }
  CHECK(dir.verify(3).find("(corrupted)") != std::string::npos);
  // One file at a time: what each rank checks of the files it reads.
  CHECK(dir.verify_file(3, "rank-1.bin").empty());
  CHECK(dir.verify_file(3, "rank-0.bin").find("(corrupted)") != std::string::npos);
  CHECK(dir.verify_file(3, "rank-7.bin").find("does not list rank-7.bin") != std::string::npos);
  write(fs::path(dir.final_path(3)) / "manifest.json", "not json");
  CHECK(dir.verify(3).find("not a meshrun checkpoint manifest") != std::string::npos);
}

TEST_CASE("a manifest's numbers out of range are errors naming the key, not undefined behaviour") {
  // Found with fuzz/ckpt_fuzz.cpp (fuzz/regressions/ckpt/manifest-*): floats
  // beyond int64 reached nlohmann's get<int64_t>(), and byte counts could
  // overflow total_bytes().
  const auto error_of = [](const std::string& files, const std::string& step = "1") {
    try {
      CheckpointManifest::from_json(R"({"format_version": 1, "global_step": )" + step +
                                        R"(, "algorithm": "sft", "recipe_hash": "h", "layout": "l", "files": [)" +
                                        files + "]}",
                                    "ck/manifest.json");
    } catch (const CheckpointError& error) {
      return std::string(error.what());
    }
    return std::string();
  };
  CHECK(error_of("").empty());
  CHECK(error_of("", "1e300") == "ck/manifest.json: global_step is 1e+300, not a 64-bit integer");
  CHECK(error_of(R"({"name": "a", "bytes": 5e20, "xxh3": "0"})") ==
        "ck/manifest.json: files[0].bytes is 5e+20, not a 64-bit integer");
  CHECK(error_of(R"({"name": "a", "bytes": -1, "xxh3": "0"})") == "ck/manifest.json: files[0].bytes -1 is negative");
  CHECK(error_of(R"({"name": "a", "bytes": 9223372036854775807, "xxh3": "0"},
                   {"name": "b", "bytes": 1, "xxh3": "0"})") ==
        "ck/manifest.json: files[1].bytes 1 makes the files total more than 2^63 bytes");
  CHECK(error_of(R"({"name": "a", "bytes": "7", "xxh3": "0"})") ==
        "ck/manifest.json: files[0].bytes is \"7\", not a 64-bit integer");
  // Names that would lead verification and loading out of the checkpoint.
  for (const std::string name : {"/etc/passwd", "../other/rank-0.bin", "hf/../../x", "", "a//b", "./a"}) {
    CAPTURE(name);
    CHECK(error_of(R"({"name": ")" + name + R"(", "bytes": 1, "xxh3": "0"})") ==
          "ck/manifest.json: files[0].name \"" + name +
              "\" is not a relative path inside the checkpoint (absolute, empty, or with ..)");
  }
  CHECK(error_of(R"({"name": "hf/actor/model.safetensors", "bytes": 1, "xxh3": "0"})").empty());
}

TEST_CASE("load policies: auto takes the newest that verifies, require needs one, never ignores them") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  std::vector<std::string> warnings;
  CHECK_FALSE(dir.choose("auto", warnings).has_value());
  CHECK_THROWS_WITH_AS(dir.choose("require", warnings), doctest::Contains("holds no complete checkpoint"),
                       CheckpointError);
  save(dir, 10);
  save(dir, 20);
  CHECK(dir.choose("auto", warnings) == 20);
  CHECK(dir.choose("require", warnings) == 20);
  CHECK_FALSE(dir.choose("never", warnings).has_value());
  CHECK(warnings.empty());
  fs::resize_file(fs::path(dir.final_path(20)) / "rank-1.bin", 3);
  CHECK(dir.choose("auto", warnings) == 10);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("global_step_20 fails verification") != std::string::npos);
  CHECK_THROWS_AS(dir.choose("sometimes", warnings), CheckpointError);
}

TEST_CASE("rotation deletes the oldest beyond keep_last or the size limit, never the newest") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  for (int64_t step : {1, 2, 3, 4}) save(dir, step);
  CHECK(dir.rotate(3, 0) == std::vector<int64_t>{1});
  CHECK(dir.complete_steps() == std::vector<int64_t>{2, 3, 4});
  CHECK(dir.rotate(0, 450) == std::vector<int64_t>{2});  // 3 × 202 bytes > 450 ≥ 2 × 202
  CHECK(dir.complete_steps() == std::vector<int64_t>{3, 4});
  CHECK(dir.rotate(0, 1) == std::vector<int64_t>{3});  // the newest stays, whatever its size
  CHECK(dir.complete_steps() == std::vector<int64_t>{4});
}

TEST_CASE("a fresh run sets another run's checkpoints aside, whole and verifiable, so rotation never meets them") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  CHECK(dir.set_aside_complete("replaced-x").empty());  // nothing to move: no folder made
  CHECK_FALSE(fs::exists(temp.path() / "replaced-x"));
  for (int64_t step : {4, 5, 6}) save(dir, step);
  const std::string aside = dir.set_aside_complete("replaced-x");
  CHECK(aside == (temp.path() / "replaced-x").string());
  CHECK(dir.complete_steps().empty());
  // The new run's first checkpoint is the newest, and rotation keeps it.
  save(dir, 1);
  CHECK(dir.rotate(1, 0).empty());
  CHECK(dir.complete_steps() == std::vector<int64_t>{1});
  // Nothing was deleted: the moved folder is a checkpoint root of its own.
  CheckpointDir moved(aside);
  CHECK(moved.complete_steps() == std::vector<int64_t>{4, 5, 6});
  CHECK(moved.verify(6).empty());
  // A second set-aside in the same second gets its own folder.
  CHECK(dir.set_aside_complete("replaced-x") == (temp.path() / "replaced-x-2").string());
}
}  // namespace meshrun

namespace meshrun {

TEST_CASE("a manifest past its bound (a substituted file) fails verification; the older one is loaded") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  save(dir, 10);
  save(dir, 20);
  const fs::path manifest = fs::path(dir.final_path(20)) / "manifest.json";
  fs::resize_file(manifest, std::uintmax_t{65} << 20);  // sparse: no disk, but 65 MiB to read
  CHECK(dir.verify(20).find("is larger than 64 MiB: not a checkpoint file") != std::string::npos);
  std::vector<std::string> warnings;
  CHECK(dir.choose("auto", warnings) == 10);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("global_step_20 fails verification") != std::string::npos);
  // Nothing was deleted: the damaged checkpoint stays for a person to look at.
  CHECK(dir.complete_steps() == std::vector<int64_t>{10, 20});
}

}  // namespace meshrun

namespace meshrun {

TEST_CASE("a file the manifest does not list fails verification: a cut manifest cannot pass damaged data") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  save(dir, 1);
  save(dir, 2);
  CHECK(dir.unlisted_file(1).empty());
  write(fs::path(dir.final_path(1)) / "rank-2.bin", "added later");
  CHECK(dir.unlisted_file(1).find("rank-2.bin is not listed in its manifest.json") != std::string::npos);
  CHECK(dir.verify(1).find("rank-2.bin is not listed") != std::string::npos);
  // A manifest whose list was emptied: every file is unlisted.
  CheckpointManifest cut = dir.manifest(2);
  cut.files.clear();
  write(fs::path(dir.final_path(2)) / "manifest.json", cut.to_json());
  CHECK(dir.verify(2).find("is not listed in its manifest.json") != std::string::npos);
  std::vector<std::string> warnings;
  CHECK_FALSE(dir.choose("auto", warnings).has_value());  // step 1 holds an unlisted file too
}

TEST_CASE("a step folder whose number does not fit int64 is ignored, not an error for the whole root") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  save(dir, 4);
  fs::create_directories(temp.path() / "global_step_99999999999999999999");
  write(temp.path() / "global_step_99999999999999999999" / "manifest.json", "{}");
  fs::create_directories(temp.path() / ".partial-global_step_99999999999999999999");
  CHECK(dir.complete_steps() == std::vector<int64_t>{4});
  CHECK(dir.remove_partials().empty());
  std::vector<std::string> warnings;
  CHECK(dir.choose("auto", warnings) == 4);
}

}  // namespace meshrun

namespace meshrun {

TEST_CASE("a step folder renamed to another step fails verification; the one that agrees is loaded") {
  test::TempDir temp;
  CheckpointDir dir(temp.path().string());
  save(dir, 10);
  save(dir, 20);
  fs::rename(dir.final_path(20), dir.final_path(30));
  CHECK(dir.verify(30).find("says global_step 20, but the folder names step 30") != std::string::npos);
  CHECK(dir.verify(10).empty());
  std::vector<std::string> warnings;
  CHECK(dir.choose("auto", warnings) == 10);
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0].find("global_step_30 fails verification") != std::string::npos);
}

}  // namespace meshrun
