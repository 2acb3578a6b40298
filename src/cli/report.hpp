// The run report: one self-contained HTML page (inline SVG and CSS, no
// scripts, nothing fetched) about a run folder: the resolved recipe, the
// plan, curves of every metric in metrics.jsonl (loss, reward, KL, entropy,
// learning rate, gradient norm, throughput, evaluation, then the rest), the
// phase-time breakdown per step, and the checkpoints.
//
// Invariants: the page depends only on ReportInput (the CLI gathers it,
// `meshrun report RUN_DIR`); every text from the run is HTML-escaped; a
// series keeps at most kMaxPoints points (evenly strided) and the phase
// chart at most kMaxBars bars (steps averaged in buckets), so the page stays
// small for runs of any length; non-finite values are left out of curves.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "meshrun/error.hpp"

namespace meshrun {

class ReportError : public KindError<ErrorKind::io> {
 public:
  using KindError::KindError;
};

struct MetricsRow {
  int64_t step = 0;
  std::map<std::string, double> values;  // every numeric key but "step"
};

// metrics.jsonl's rows. Throws ReportError naming the file (and each bad
// line: not JSON, not an object, no integer "step").
std::vector<MetricsRow> read_metrics_rows(const std::string& path);

struct ReportCheckpoint {
  int64_t step = 0;
  std::string path;
  int64_t bytes = 0;
  std::string layout;
};

struct ReportInput {
  std::string run_dir;
  std::vector<MetricsRow> rows;
  std::string algorithm;      // empty: unknown
  std::string resolved_toml;  // empty: the run folder has none
  std::string plan_text;      // empty: no plan
  std::string plan_note;      // why there is no plan, or what is wrong with it
  std::string checkpoint_dir;  // empty: unknown
  std::vector<ReportCheckpoint> checkpoints;
  std::vector<std::string> partial_checkpoints;  // interrupted saves
  std::string generated_at;   // a local time, for the footer
};

inline constexpr size_t kMaxPoints = 2000;
inline constexpr size_t kMaxBars = 400;

std::string report_html(const ReportInput& input);

}  // namespace meshrun
