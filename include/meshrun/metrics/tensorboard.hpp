// TensorBoard event files, written natively: `[logging] tensorboard = true`
// puts every numeric metric of each metrics row into
// <logging.dir>/events.out.tfevents.<unix time>.<host>.<pid> as a scalar
// (Summary.Value.simple_value) at its step, readable by TensorBoard and
// anything built on its event reader.
//
// The format is TensorFlow's TFRecord framing (length, masked CRC-32C of
// the length, the bytes, masked CRC-32C of the bytes) around Event protos,
// encoded by hand: a handful of fields (wall_time, step, file_version,
// summary, session_log) is all a scalar log needs, and libprotobuf in the
// LibTorch process risks clashing with the copy inside torch.
//
// Each process run opens a new file (TensorBoard reads them all in name
// order). A resumed run first writes a SessionLog START at its first step,
// which makes TensorBoard drop the earlier files' events from that step on,
// as metrics.jsonl is cut back. Every record is flushed when written, so a
// crash loses at most the record being written. Only the writing rank
// touches the file (enabled = false: does nothing).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "meshrun/metrics/metrics.hpp"

namespace meshrun {

class TensorBoardWriter {
 public:
  // Creates `dir` and the event file with its file_version event. Throws
  // MetricsError naming the path when it cannot.
  TensorBoardWriter(const std::string& dir, bool enabled);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // A run resumed at `step`: earlier files' events from `step` on are stale.
  void restart_at(int64_t step);
  // The record's numbers (integers and booleans as numbers; strings are
  // left out) as scalars at record.step(). Throws MetricsError naming the
  // path on a write error.
  void write(const MetricsRecord& record);
  bool enabled() const { return file_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  void append(const std::string& event);
  std::string path_;
  std::FILE* file_ = nullptr;
};

// The encoding, exposed for tests.
namespace tensorboard_detail {

// CRC-32C (Castagnoli), and TFRecord's masking of it.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);
// One TFRecord: 8-byte little-endian length, its masked CRC, the data, the data's masked CRC.
std::string frame_record(std::string_view data);

// Event protos.
std::string file_version_event(double wall_time);
std::string session_start_event(double wall_time, int64_t step);
std::string scalars_event(double wall_time, int64_t step, const std::vector<std::pair<std::string, float>>& values);

}  // namespace tensorboard_detail
}  // namespace meshrun
