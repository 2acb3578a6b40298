// MetricsWriter: rank 0 appends one flushed line per record.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "meshrun/bounded_json.hpp"
#include "meshrun/metrics/metrics.hpp"

namespace meshrun {

MetricsWriter::MetricsWriter(const std::string& dir, bool enabled, const std::string& file_name)
    : path_((std::filesystem::path(dir) / file_name).string()) {
  if (!enabled) return;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw MetricsError("metrics: cannot create folder " + dir + ": " + error.message());
  file_ = std::fopen(path_.c_str(), "a");
  if (file_ == nullptr) {
    throw MetricsError("metrics: cannot open " + path_ + " for appending: " + std::strerror(errno));
  }
}

void MetricsWriter::keep_steps_up_to(const std::string& path, int64_t last_step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept, line;
  while (std::getline(in, line)) {
    const auto json = parse_bounded_json(line, /*allow_exceptions=*/false);
    const bool keep = !json.is_discarded() && json.contains("step") && json["step"].is_number_integer() &&
                      json["step"].get<int64_t>() <= last_step;
    if (keep) kept += line + "\n";
  }
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << kept;
    if (!out) throw MetricsError("metrics: cannot write " + temporary);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) throw MetricsError("metrics: cannot replace " + path + ": " + error.message());
}

MetricsWriter::~MetricsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void MetricsWriter::write(const MetricsRecord& record) {
  if (file_ == nullptr) return;
  const std::string line = record.to_json() + '\n';
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    throw MetricsError("metrics: cannot write to " + path_ + ": " + std::strerror(errno));
  }
}

}  // namespace meshrun
