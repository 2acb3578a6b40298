// Tests of src/metrics/metrics_writer.cpp: the file, appending on resume,
// flushing, and only the writing rank touching the disk.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshrun/metrics/metrics.hpp"
#include "support/temp_dir.hpp"

namespace meshrun {
namespace {

using test::TempDir;

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("creates the folder and writes one flushed line per record") {
  TempDir temp;
  const auto dir = temp.path() / "logs" / "run";
  MetricsWriter writer(dir.string(), true);
  CHECK(writer.enabled());
  CHECK(writer.path() == (dir / "metrics.jsonl").string());
  writer.write(MetricsRecord(1).set("loss", 2.5));
  // Readable before the writer is closed: each line is flushed.
  CHECK(read_file(dir / "metrics.jsonl") == "{\"step\":1,\"loss\":2.5}\n");
  writer.write(MetricsRecord(2).set("loss", 2.0));
  CHECK(read_file(dir / "metrics.jsonl") == "{\"step\":1,\"loss\":2.5}\n{\"step\":2,\"loss\":2}\n");
}

TEST_CASE("a resumed run appends to the same file") {
  TempDir temp;
  {
    MetricsWriter writer(temp.path().string(), true);
    writer.write(MetricsRecord(1));
  }
  {
    MetricsWriter writer(temp.path().string(), true);
    writer.write(MetricsRecord(2));
  }
  CHECK(read_file(temp.path() / "metrics.jsonl") == "{\"step\":1}\n{\"step\":2}\n");
}

TEST_CASE("a writer that is not rank 0 touches nothing") {
  TempDir temp;
  const auto dir = temp.path() / "never";
  MetricsWriter writer(dir.string(), false);
  CHECK_FALSE(writer.enabled());
  writer.write(MetricsRecord(1).set("loss", 1.0));
  CHECK_FALSE(std::filesystem::exists(dir));
}

TEST_CASE("a folder that cannot be created is an error naming it") {
  TempDir temp;
  std::filesystem::create_directories(temp.path());
  std::ofstream(temp.path() / "file") << "x";
  const std::string blocked = (temp.path() / "file" / "logs").string();
  const std::string cannot_create = "metrics: cannot create folder " + blocked;
  CHECK_THROWS_WITH_AS(MetricsWriter(blocked, true), doctest::Contains(cannot_create.c_str()), MetricsError);
  std::filesystem::create_directories(temp.path() / "dir" / "metrics.jsonl");
  const std::string cannot_open = "cannot open " + (temp.path() / "dir" / "metrics.jsonl").string();
  CHECK_THROWS_WITH_AS(MetricsWriter((temp.path() / "dir").string(), true), doctest::Contains(cannot_open.c_str()),
                       MetricsError);
}

TEST_CASE("a custom file name") {
  TempDir temp;
  MetricsWriter writer(temp.path().string(), true, "eval.jsonl");
  writer.write(MetricsRecord(3).set("acc", 0.75));
  CHECK(read_file(temp.path() / "eval.jsonl") == "{\"step\":3,\"acc\":0.75}\n");
}

}  // namespace
}  // namespace meshrun
