// TensorBoard event files (include/meshrun/metrics/tensorboard.hpp).
#include "meshrun/metrics/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace meshrun {
namespace tensorboard_detail {
namespace {

// Hand-written: Debian 12 packages no C/C++ CRC-32C library (Google's
// crc32c is not in bookworm, and Boost.CRC would add Boost for these lines).
// Reflected polynomial 0x82F63B78, one byte per table lookup: event files
// are a few hundred bytes per step.
constexpr std::array<uint32_t, 256> kCrc32cTable = [] {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1) ? 0x82F63B78u : 0u);
    table[i] = crc;
  }
  return table;
}();

// Protocol-buffer wire format, only what Event needs.
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}
template <typename T>
void put_fixed(std::string& out, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  unsigned char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(reinterpret_cast<const char*>(bytes), sizeof(T));
}
void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Event fields: wall_time = 1 (double), step = 2 (int64), file_version = 3,
// summary = 5, session_log = 7 (6 is the deprecated log_message).
std::string event_head(double wall_time, int64_t step) {
  std::string event;
  put_tag(event, 1, 1);
  put_fixed(event, wall_time);
  if (step != 0) {
    put_tag(event, 2, 0);
    put_varint(event, static_cast<uint64_t>(step));
  }
  return event;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  uint32_t crc = 0xFFFFFFFFu;
  for (unsigned char byte : data) crc = kCrc32cTable[(crc ^ byte) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t crc = crc32c(data);
  return ((crc >> 15) | (crc << 17)) + 0xA282EAD8u;
}

std::string frame_record(std::string_view data) {
  std::string out;
  std::string length;
  put_fixed(length, static_cast<uint64_t>(data.size()));
  out += length;
  put_fixed(out, masked_crc32c(length));
  out.append(data);
  put_fixed(out, masked_crc32c(data));
  return out;
}

std::string file_version_event(double wall_time) {
  std::string event = event_head(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string session_start_event(double wall_time, int64_t step) {
  std::string event = event_head(wall_time, step);
  std::string session_log;
  put_tag(session_log, 1, 0);  // status = START (1)
  put_varint(session_log, 1);
  put_bytes(event, 7, session_log);
  return event;
}

std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values) {
  std::string summary;
  for (const auto& [tag, value] : values) {
    std::string entry;  // Summary.Value: tag = 1, simple_value = 2 (float)
    put_bytes(entry, 1, tag);
    put_tag(entry, 2, 5);
    put_fixed(entry, value);
    put_bytes(summary, 1, entry);
  }
  std::string event = event_head(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

}  // namespace tensorboard_detail

namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, bool enabled) {
  if (!enabled) return;
  namespace fs = std::filesystem;
  std::error_code error;
  fs::create_directories(dir, error);
  char host[256] = "localhost";
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  host[sizeof(host) - 1] = '\0';
  const double now = unix_seconds();
  path_ = (fs::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<long long>(now)) + "." + host + "." +
                            std::to_string(getpid())))
              .string();
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) throw MetricsError("cannot open " + path_ + " for TensorBoard events: " + std::strerror(errno));
  append(tensorboard_detail::file_version_event(now));
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
}

void TensorBoardWriter::restart_at(int64_t step) {
  if (file_) append(tensorboard_detail::session_start_event(unix_seconds(), step));
}

void TensorBoardWriter::write(const MetricsRecord& record) {
  if (!file_) return;
  std::vector<std::pair<std::string, float>> values;
  for (const auto& [name, value] : record.values()) {
    if (const double* number = std::get_if<double>(&value)) values.emplace_back(name, static_cast<float>(*number));
    else if (const int64_t* integer = std::get_if<int64_t>(&value)) values.emplace_back(name, static_cast<float>(*integer));
    else if (const bool* flag = std::get_if<bool>(&value)) values.emplace_back(name, *flag ? 1.0f : 0.0f);
  }
  append(tensorboard_detail::scalars_event(unix_seconds(), record.step(), values));
}

void TensorBoardWriter::append(const std::string& event) {
  const std::string record = tensorboard_detail::frame_record(event);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0)
    throw MetricsError("cannot write TensorBoard events to " + path_ + ": " + std::strerror(errno));
}

}  // namespace meshrun
