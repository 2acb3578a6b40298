// The TensorBoard writer's encoding against hand-computed bytes (CRC-32C's
// check value, masking, TFRecord framing, Event protos) and its files: one
// framed record per event with valid CRCs, nothing from a disabled writer.
// tests/integration/sft_test.sh reads real runs' files with TensorBoard's
// own reader.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "meshrun/metrics/tensorboard.hpp"
#include "support/temp_dir.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;
using namespace tensorboard_detail;

std::string bytes(std::initializer_list<unsigned> values) {
  std::string out;
  for (unsigned value : values) out.push_back(static_cast<char>(value));
  return out;
}

uint32_t le32(const std::string& data, size_t at) {
  uint32_t value = 0;
  std::memcpy(&value, data.data() + at, 4);
  return value;
}

// The records of a TFRecord file, their CRCs checked.
std::vector<std::string> read_records(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  size_t at = 0;
  while (at < data.size()) {
    REQUIRE(at + 12 <= data.size());
    uint64_t length = 0;
    std::memcpy(&length, data.data() + at, 8);
    REQUIRE(le32(data, at + 8) == masked_crc32c(data.substr(at, 8)));
    REQUIRE(at + 12 + length + 4 <= data.size());
    const std::string record = data.substr(at + 12, length);
    REQUIRE(le32(data, at + 12 + length) == masked_crc32c(record));
    records.push_back(record);
    at += 12 + length + 4;
  }
  return records;
}

}  // namespace

TEST_CASE("CRC-32C and TFRecord's masking give the known values") {
  CHECK(crc32c("123456789") == 0xE3069283u);  // the CRC catalogue's check value
  CHECK(crc32c("") == 0u);
  CHECK(masked_crc32c("123456789") == 0xC78AB0E5u);  // rotated right by 15, plus 0xA282EAD8
}

TEST_CASE("a TFRecord frames its data with the length and both masked CRCs") {
  const std::string framed = frame_record("abc");
  REQUIRE(framed.size() == 8 + 4 + 3 + 4);
  CHECK(framed.substr(0, 8) == bytes({3, 0, 0, 0, 0, 0, 0, 0}));
  CHECK(le32(framed, 8) == masked_crc32c(framed.substr(0, 8)));
  CHECK(framed.substr(12, 3) == "abc");
  CHECK(le32(framed, 15) == masked_crc32c("abc"));
}

TEST_CASE("Event protos encode wall_time, step, file_version, summary and session_log") {
  const std::string wall_1_5 = bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F});  // field 1, fixed64 1.5
  CHECK(file_version_event(1.5) == wall_1_5 + bytes({0x1A, 13}) + "brain.Event:2");
  // step 300 is the varint AC 02; session_log (field 7) holds status START.
  CHECK(session_start_event(1.5, 300) == wall_1_5 + bytes({0x10, 0xAC, 0x02, 0x3A, 2, 0x08, 1}));
  // summary (field 5) → value (field 1) → tag "a" (field 1), simple_value 0.5 (field 2, fixed32).
  CHECK(scalars_event(1.5, 3, {{"a", 0.5f}}) ==
        wall_1_5 + bytes({0x10, 3, 0x2A, 10, 0x0A, 8, 0x0A, 1, 'a', 0x15, 0, 0, 0, 0x3F}));
}

TEST_CASE("the writer appends one framed event per call, flushed; a disabled one writes nothing") {
  test::TempDir temp;
  {
    TensorBoardWriter disabled((temp.path() / "off").string(), false);
    disabled.write(MetricsRecord(1).set("loss", 1.0));
    CHECK_FALSE(disabled.enabled());
    CHECK_FALSE(fs::exists(temp.path() / "off"));
  }
  TensorBoardWriter writer((temp.path() / "logs").string(), true);
  CHECK(fs::path(writer.path()).filename().string().rfind("events.out.tfevents.", 0) == 0);
  writer.write(MetricsRecord(1).set("loss", 2.5).set("tokens", int64_t{7}).set("skipped", true).set("note", "x"));
  writer.restart_at(2);
  const auto records = read_records(writer.path());  // before closing: every record is flushed
  REQUIRE(records.size() == 3);
  CHECK(records[0].find("brain.Event:2") != std::string::npos);
  CHECK(records[1].find("loss") != std::string::npos);
  CHECK(records[1].find("tokens") != std::string::npos);
  CHECK(records[1].find("skipped") != std::string::npos);
  CHECK(records[1].find("note") == std::string::npos);  // strings are not scalars
  CHECK(records[2].substr(9) == bytes({0x10, 2, 0x3A, 2, 0x08, 1}));
}

}  // namespace meshrun
