// The run report (report.hpp). The charts are hand-written
// SVG: Debian packages no C++ plotting library that writes SVG, and a page
// that must work offline cannot pull a JavaScript one; what is needed (line
// charts with a grid, and stacked bars) is a few dozen lines.
#include "report.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "meshrun/data/jsonl_reader.hpp"

namespace meshrun {
namespace {

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string number(double value) { return fmt::format("{:.4g}", value); }

// A tick spacing of 1, 2 or 5 times a power of ten giving about `count` ticks.
double nice_step(double range, int count) {
  const double raw = range / count;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * power) return m * power;
  return 10 * power;
}

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                               "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"};
constexpr size_t kColorCount = sizeof kColors / sizeof kColors[0];

struct Series {
  std::string name;
  std::vector<std::pair<double, double>> points;  // step, value
};

Series series_of(const std::vector<MetricsRow>& rows, const std::string& key) {
  Series series{key, {}};
  for (const MetricsRow& row : rows) {
    auto it = row.values.find(key);
    if (it != row.values.end() && std::isfinite(it->second))
      series.points.emplace_back(static_cast<double>(row.step), it->second);
  }
  if (series.points.size() > kMaxPoints) {
    std::vector<std::pair<double, double>> kept;
    const double stride = static_cast<double>(series.points.size() - 1) / static_cast<double>(kMaxPoints - 1);
    for (size_t i = 0; i < kMaxPoints; ++i)
      kept.push_back(series.points[static_cast<size_t>(std::llround(static_cast<double>(i) * stride))]);
    series.points = std::move(kept);
  }
  return series;
}

constexpr double kWidth = 720, kHeight = 260, kLeft = 64, kRight = 16, kTop = 16, kBottom = 40;

struct Frame {
  double x0, x1, y0, y1;
  double x(double step) const { return kLeft + (step - x0) / (x1 - x0) * (kWidth - kLeft - kRight); }
  double y(double value) const { return kHeight - kBottom - (value - y0) / (y1 - y0) * (kHeight - kTop - kBottom); }
};

Frame frame_for(double x0, double x1, double y0, double y1) {
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) {
    const double pad = std::abs(y0) > 0 ? std::abs(y0) * 0.1 : 1;
    y0 -= pad;
    y1 += pad;
  } else {
    const double pad = (y1 - y0) * 0.05;
    y0 -= pad;
    y1 += pad;
  }
  return {x0, x1, y0, y1};
}

// The grid, tick labels and the axis titles.
std::string axes(const Frame& f, const std::string& y_title) {
  std::string svg;
  const double y_step = nice_step(f.y1 - f.y0, 5);
  for (double v = std::ceil(f.y0 / y_step) * y_step; v <= f.y1; v += y_step) {
    const double y = f.y(v);
    svg += fmt::format("<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' class='grid'/>", kLeft, y,
                       kWidth - kRight, y);
    svg += fmt::format("<text x='{:.1f}' y='{:.1f}' class='tick' text-anchor='end'>{}</text>", kLeft - 6, y + 4,
                       number(std::abs(v) < y_step * 1e-9 ? 0.0 : v));
  }
  const double x_step = std::max(1.0, nice_step(f.x1 - f.x0, 8));
  for (double s = std::ceil(f.x0 / x_step) * x_step; s <= f.x1; s += x_step) {
    const double x = f.x(s);
    svg += fmt::format("<line x1='{:.1f}' y1='{:.1f}' x2='{:.1f}' y2='{:.1f}' class='grid'/>", x, kTop, x,
                       kHeight - kBottom);
    svg += fmt::format("<text x='{:.1f}' y='{:.1f}' class='tick' text-anchor='middle'>{}</text>", x,
                       kHeight - kBottom + 16, number(s));
  }
  svg += fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' class='frame'/>", kLeft, kTop,
                     kWidth - kLeft - kRight, kHeight - kTop - kBottom);
  svg += fmt::format("<text x='{:.1f}' y='{:.1f}' class='axis' text-anchor='middle'>step</text>",
                     (kLeft + kWidth - kRight) / 2, kHeight - 6);
  svg += fmt::format("<text x='14' y='{:.1f}' class='axis' text-anchor='middle' transform='rotate(-90 14 {:.1f})'>{}</text>",
                     (kTop + kHeight - kBottom) / 2, (kTop + kHeight - kBottom) / 2, escape(y_title));
  return svg;
}

std::string legend(const std::vector<std::string>& names) {
  std::string html = "<div class='legend'>";
  for (size_t i = 0; i < names.size(); ++i)
    html += fmt::format("<span><i style='background:{}'></i>{}</span>", kColors[i % kColorCount], escape(names[i]));
  return html + "</div>";
}

std::string line_chart(const std::string& title, const std::vector<Series>& all) {
  std::vector<const Series*> series;
  for (const Series& s : all)
    if (!s.points.empty()) series.push_back(&s);
  if (series.empty()) return "";
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (const Series* s : series) {
    for (const auto& [step, value] : s->points) {
      x0 = std::min(x0, step);
      x1 = std::max(x1, step);
      y0 = std::min(y0, value);
      y1 = std::max(y1, value);
    }
  }
  const Frame f = frame_for(x0, x1, y0, y1);
  std::string svg = fmt::format("<svg viewBox='0 0 {} {}' role='img' aria-label='{}'>", kWidth, kHeight, escape(title));
  svg += axes(f, title);
  std::vector<std::string> names;
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = *series[i];
    names.push_back(s.name);
    std::string points;
    for (const auto& [step, value] : s.points) points += fmt::format("{:.1f},{:.1f} ", f.x(step), f.y(value));
    if (s.points.size() == 1) {
      svg += fmt::format("<circle cx='{:.1f}' cy='{:.1f}' r='3' fill='{}'><title>{}</title></circle>",
                         f.x(s.points[0].first), f.y(s.points[0].second), kColors[i % kColorCount], escape(s.name));
    } else {
      svg += fmt::format("<polyline points='{}' fill='none' stroke='{}' stroke-width='1.6'><title>{}</title></polyline>",
                         points, kColors[i % kColorCount], escape(s.name));
    }
  }
  svg += "</svg>";
  return fmt::format("<figure><figcaption>{}</figcaption>{}{}</figure>", escape(title), svg, legend(names));
}

// Phase seconds per step ("time/rollout", ...), stacked; steps averaged in
// buckets when there are more than kMaxBars.
std::string phase_chart(const std::vector<MetricsRow>& rows, const std::vector<std::string>& phases) {
  if (phases.empty() || rows.empty()) return "";
  const size_t buckets = std::min(rows.size(), kMaxBars);
  struct Bar {
    double first_step = 0, last_step = 0;
    std::vector<double> seconds;
  };
  std::vector<Bar> bars(buckets);
  std::vector<size_t> counts(buckets, 0);
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t b = i * buckets / rows.size();
    Bar& bar = bars[b];
    if (counts[b] == 0) {
      bar.first_step = static_cast<double>(rows[i].step);
      bar.seconds.assign(phases.size(), 0);
    }
    bar.last_step = static_cast<double>(rows[i].step);
    for (size_t p = 0; p < phases.size(); ++p) {
      auto it = rows[i].values.find(phases[p]);
      if (it != rows[i].values.end() && std::isfinite(it->second) && it->second > 0) bar.seconds[p] += it->second;
    }
    ++counts[b];
  }
  double top = 0;
  for (size_t b = 0; b < buckets; ++b) {
    double total = 0;
    for (double& s : bars[b].seconds) total += (s /= static_cast<double>(counts[b]));
    top = std::max(top, total);
  }
  Frame f = frame_for(0, static_cast<double>(buckets), 0, top > 0 ? top : 1);
  f.y0 = 0;
  const double width = (kWidth - kLeft - kRight) / static_cast<double>(buckets);
  std::string svg = fmt::format("<svg viewBox='0 0 {} {}' role='img' aria-label='phase time per step'>", kWidth, kHeight);
  // The x axis counts bars; label it with steps.
  Frame steps = frame_for(bars.front().first_step, bars.back().last_step, 0, top > 0 ? top : 1);
  steps.y0 = 0;
  svg += axes(steps, "seconds");
  for (size_t b = 0; b < buckets; ++b) {
    double base = 0;
    for (size_t p = 0; p < phases.size(); ++p) {
      const double s = bars[b].seconds[p];
      if (s <= 0) continue;
      const double y_top = f.y(base + s), y_bottom = f.y(base);
      const std::string steps_text = bars[b].first_step == bars[b].last_step
                                         ? fmt::format("step {}", number(bars[b].first_step))
                                         : fmt::format("steps {}-{}", number(bars[b].first_step), number(bars[b].last_step));
      svg += fmt::format("<rect x='{:.2f}' y='{:.2f}' width='{:.2f}' height='{:.2f}' fill='{}'><title>{}: {} {} s</title></rect>",
                         kLeft + static_cast<double>(b) * width, y_top, std::max(width - 0.5, 0.5), y_bottom - y_top,
                         kColors[p % kColorCount], steps_text, escape(phases[p]), number(s));
      base += s;
    }
  }
  svg += "</svg>";
  return fmt::format("<figure><figcaption>Phase time per step</figcaption>{}{}</figure>", svg, legend(phases));
}

struct ChartGroup {
  const char* title;
  std::vector<std::string> keys;  // exact keys, in order
  const char* prefix = nullptr;   // or every key with this prefix
};

const std::string kCss = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1b1f24;background:#fff}
header{background:#24292f;color:#fff;padding:18px 32px}header h1{margin:0;font-size:22px}
header p{margin:4px 0 0;color:#c9d1d9}main{padding:8px 32px 32px;max-width:1560px}
h2{font-size:18px;margin:28px 0 10px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:18px}
figure{margin:0;border:1px solid #d0d7de;border-radius:6px;padding:10px 12px}
figcaption{font-weight:600;margin-bottom:4px}svg{width:100%;height:auto;display:block}
.grid{stroke:#eaeef2;stroke-width:1}.frame{fill:none;stroke:#8c959f;stroke-width:1}
.tick{font-size:11px;fill:#57606a}.axis{font-size:12px;fill:#24292f}
.legend{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;margin-top:4px}
.legend i{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:4px;vertical-align:-1px}
pre{background:#f6f8fa;border:1px solid #d0d7de;border-radius:6px;padding:12px;overflow:auto;max-height:480px;font-size:12px}
table{border-collapse:collapse}td,th{border:1px solid #d0d7de;padding:4px 10px;text-align:left}
th{background:#f6f8fa}.note{color:#57606a}dl{display:grid;grid-template-columns:max-content auto;gap:2px 16px}
dt{font-weight:600}dd{margin:0}
)";

}  // namespace

std::vector<MetricsRow> read_metrics_rows(const std::string& path) {
  std::vector<MetricsRow> rows;
  data::ProblemList problems(path, 10);
  // Names charted at most: a run logs tens (hooks add some); a file with
  // hundreds of thousands (a hook that invents a name per step) would make
  // the report's memory and its charts grow with names × rows.
  constexpr size_t kMaxMetricNames = 1024;
  std::set<std::string> names;
  std::set<std::string> left_out;
  try {
    data::read_jsonl(path, problems, [&](long long line, const nlohmann::json& object) {
      auto step = object.find("step");
      if (step == object.end() || !step->is_number_integer()) {
        problems.add(line, "step", "no integer \"step\"");
        return;
      }
      MetricsRow row;
      row.step = step->get<int64_t>();
      for (auto it = object.begin(); it != object.end(); ++it) {
        if (it.key() == "step" || !it.value().is_number()) continue;
        if (!names.count(it.key())) {
          if (names.size() >= kMaxMetricNames) {
            if (left_out.size() < kMaxMetricNames) left_out.insert(it.key());
            continue;
          }
          names.insert(it.key());
        }
        row.values[it.key()] = it.value().get<double>();
      }
      rows.push_back(std::move(row));
    });
    problems.throw_if_any();
  } catch (const Error& error) {
    throw ReportError(error.what());
  }
  if (!left_out.empty())
    spdlog::warn("{}: more than {} metric names; the report charts the first {} and leaves out {}{} (e.g. {})", path,
                 kMaxMetricNames, kMaxMetricNames, left_out.size() >= kMaxMetricNames ? "at least " : "",
                 left_out.size(), *left_out.begin());
  return rows;
}

std::string report_html(const ReportInput& input) {
  std::set<std::string> keys;
  for (const MetricsRow& row : input.rows)
    for (const auto& [key, value] : row.values) keys.insert(key);
  keys.erase("time");
  const std::vector<ChartGroup> groups = {
      {"Loss", {"loss", "policy_loss", "value_loss", "kl_loss", "eval_loss"}},
      {"Reward", {"reward_mean", "hook_reward_mean", "model_reward_mean", "env/reward_mean", "reward_std"}},
      {"KL", {"kl", "kl_coef"}},
      {"Entropy", {"entropy"}},
      {"Learning rate", {"lr"}},
      {"Gradient norm", {"grad_norm"}},
      {"Throughput (tokens/s)", {"tokens_per_s", "rollout_tokens_per_s", "train_tokens_per_s"}},
      {"Response length (tokens)", {"response_len", "response_len/p50", "response_len/p90", "response_len/max"}},
      {"Rollout slots busy", {"rollout/slot_utilization"}},
      {"Rollout KV blocks at the peak", {"rollout/kv_peak_blocks"}},
      {"Rollout preemptions", {"rollout/preemptions"}},
      {"Prompt tokens shared by a group's samples", {"rollout/prefix_shared_tokens"}},
      {"Episode turns", {"env/turns_mean", "env/turns_max"}},
      {"How episodes ended", {"env/done_frac", "env/truncated_frac", "env/observation_cut_frac"}},
      {"Observation tokens per episode", {"env/observation_tokens_mean"}},
      {"Environment time (s)", {"env/step_time_s", "env/time_s"}},
      {"Evaluation", {}, "eval_"},
  };
  std::set<std::string> charted;
  std::string charts;
  for (const ChartGroup& group : groups) {
    std::vector<Series> series;
    for (const std::string& key : group.keys)
      if (keys.count(key) && !charted.count(key)) {
        series.push_back(series_of(input.rows, key));
        charted.insert(key);
      }
    if (group.prefix)
      for (const std::string& key : keys)
        if (key.rfind(group.prefix, 0) == 0 && !charted.count(key)) {
          series.push_back(series_of(input.rows, key));
          charted.insert(key);
        }
    charts += line_chart(group.title, series);
  }
  std::vector<std::string> phases;
  for (const std::string& key : keys)
    if (key.rfind("time/", 0) == 0) {
      phases.push_back(key);
      charted.insert(key);
    }
  std::string others;
  for (const std::string& key : keys)
    if (!charted.count(key)) others += line_chart(key, {series_of(input.rows, key)});

  const std::string title = "meshrun report: " + input.run_dir;
  std::string html = "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>" + escape(title) +
                     "</title><meta name='viewport' content='width=device-width, initial-scale=1'><style>" + kCss +
                     "</style></head><body>\n";
  std::string subtitle = input.algorithm.empty() ? std::string("algorithm unknown") : input.algorithm;
  if (!input.rows.empty())
    subtitle += fmt::format(" · steps {}–{} ({} rows)", input.rows.front().step, input.rows.back().step, input.rows.size());
  html += "<header><h1>" + escape(title) + "</h1><p>" + escape(subtitle) + "</p></header><main>\n";

  html += "<h2 id='summary'>Summary</h2><dl>";
  html += "<dt>Run folder</dt><dd>" + escape(input.run_dir) + "</dd>";
  if (!input.rows.empty()) {
    const MetricsRow& first = input.rows.front();
    const MetricsRow& last = input.rows.back();
    auto t0 = first.values.find("time"), t1 = last.values.find("time");
    if (t0 != first.values.end() && t1 != last.values.end())
      html += fmt::format("<dt>Wall time</dt><dd>{} s over the logged steps</dd>", number(t1->second - t0->second));
    for (const char* key : {"loss", "reward_mean", "eval_loss"}) {
      const Series s = series_of(input.rows, key);
      if (!s.points.empty())
        html += fmt::format("<dt>{}</dt><dd>{} → {}</dd>", key, number(s.points.front().second),
                            number(s.points.back().second));
    }
  }
  html += "</dl>\n";

  html += "<h2 id='curves'>Curves</h2>";
  if (input.rows.empty()) html += "<p class='note'>metrics.jsonl has no rows yet.</p>";
  html += "<div class='charts'>" + charts + "</div>\n";
  html += "<h2 id='phases'>Phase time per step</h2>";
  html += phases.empty() ? std::string("<p class='note'>The metrics have no time/ phases.</p>")
                         : "<div class='charts'>" + phase_chart(input.rows, phases) + "</div>";
  html += "\n";
  if (!others.empty()) html += "<h2 id='other-metrics'>Other metrics</h2><div class='charts'>" + others + "</div>\n";

  html += "<h2 id='checkpoints'>Checkpoints</h2>";
  if (input.checkpoint_dir.empty()) {
    html += "<p class='note'>The checkpoint folder is not known (no resolved.toml in the run folder).</p>";
  } else if (input.checkpoints.empty() && input.partial_checkpoints.empty()) {
    html += "<p class='note'>No checkpoint in " + escape(input.checkpoint_dir) + ".</p>";
  } else {
    html += "<p>In " + escape(input.checkpoint_dir) + "</p><table><tr><th>step</th><th>folder</th><th>size</th><th>layout</th></tr>";
    for (const ReportCheckpoint& c : input.checkpoints)
      html += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.1f} MB</td><td>{}</td></tr>", c.step, escape(c.path),
                          static_cast<double>(c.bytes) / 1e6, escape(c.layout));
    for (const std::string& partial : input.partial_checkpoints)
      html += "<tr><td>—</td><td>" + escape(partial) + "</td><td colspan='2'>partial (an interrupted save)</td></tr>";
    html += "</table>";
  }
  html += "\n<h2 id='plan'>Plan</h2>";
  if (!input.plan_note.empty()) html += "<p class='note'>" + escape(input.plan_note) + "</p>";
  if (!input.plan_text.empty()) html += "<pre>" + escape(input.plan_text) + "</pre>";
  html += "\n<h2 id='recipe'>Resolved recipe</h2>";
  html += input.resolved_toml.empty()
              ? std::string("<p class='note'>The run folder has no resolved.toml (a run of an earlier meshrun).</p>")
              : "<pre>" + escape(input.resolved_toml) + "</pre>";
  html += "\n</main><footer><p class='note' style='padding:0 32px 24px'>Written by meshrun report" +
          (input.generated_at.empty() ? std::string() : " at " + escape(input.generated_at)) +
          ".</p></footer></body></html>\n";
  return html;
}

}  // namespace meshrun
