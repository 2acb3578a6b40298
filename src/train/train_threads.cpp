#include "meshrun/train/train_threads.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <spdlog/spdlog.h>
#include <sstream>
#include <string>
#include <thread>
#include <torch/torch.h>

namespace meshrun::train_detail {
namespace {

// The thread count `variable` asks for: 0 when unset or empty; a positive
// integer up to `most`; anything else a LaunchEnvError naming it (a count
// silently ignored, or 100 000 threads per process, is a run that crawls
// or stalls). OMP_NUM_THREADS may be a list ("8,2": nested levels): its
// first entry counts.
int thread_count(const Environment& environment, const char* variable, int most) {
  const std::optional<std::string> text = environment.get(variable);
  if (!text || text->empty()) return 0;
  std::string first = *text;
  if (std::string(variable) == "OMP_NUM_THREADS") first = first.substr(0, first.find(','));
  int value = 0;
  try {
    size_t used = 0;
    value = std::stoi(first, &used);
    if (used != first.size()) value = 0;
  } catch (const std::exception&) {
    value = 0;
  }
  if (value < 1 || value > most)
    throw LaunchEnvError(std::string(variable) + "='" + *text + "': CPU threads per process must be a whole number " +
                         "from 1 to " + std::to_string(most) + " (4 × this machine's cores); unset it for the " +
                         "cores shared out among the node's processes");
  return value;
}

// Intervals shorter than this measure the scheduler's tick (10 ms) more
// than the load.
constexpr double kMinIntervalSeconds = 1.0;
constexpr int kLongestProbeWait = 32;
// A team that held this many intervals after growing met new contention
// when it shrinks, not the one it waited out: the wait starts again at one.
constexpr int kStableIntervals = 8;
// /proc/stat has a line per CPU and a few more; a file longer than this is
// not what this reader understands.
constexpr int kMaxStatLines = 1 << 16;

// CPU time in clock ticks, from /proc (the kernel's accounting; LibTorch
// and OpenMP expose nothing about other processes, hence this reader).
struct CpuTimes {
  double busy = 0;  // of the CPUs in the affinity mask, every process
  double own = 0;   // this process, all its threads
  double cores = 0;
  std::chrono::steady_clock::time_point at;
};

std::optional<CpuTimes> read_cpu_times() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0) return std::nullopt;
  CpuTimes times;
  times.at = std::chrono::steady_clock::now();
  std::ifstream stat("/proc/stat");
  std::string line;
  for (int lines = 0; lines < kMaxStatLines && std::getline(stat, line); ++lines) {
    if (line.size() < 4 || line.compare(0, 3, "cpu") != 0 || !std::isdigit(static_cast<unsigned char>(line[3])))
      continue;
    std::istringstream fields(line.substr(3));
    long cpu = -1;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (!(fields >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq)) continue;
    fields >> steal;  // absent on old kernels
    if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &allowed)) continue;
    // Steal is time the hypervisor gave this CPU to someone else: as lost to
    // this process as a busy neighbour's.
    times.busy += user + nice + system + irq + softirq + steal;
    times.cores += 1;
  }
  std::ifstream self("/proc/self/stat");
  std::string text;
  if (times.cores == 0 || !std::getline(self, text)) return std::nullopt;
  // The command name in parentheses may hold spaces: fields count from
  // after its closing parenthesis (field 3, the state); utime and stime are
  // fields 14 and 15.
  const size_t name_end = text.rfind(')');
  if (name_end == std::string::npos) return std::nullopt;
  std::istringstream fields(text.substr(name_end + 1));
  std::string field;
  double utime = 0, stime = 0;
  for (int index = 3; index <= 15 && fields >> field; ++index) {
    if (index == 14) utime = std::strtod(field.c_str(), nullptr);
    if (index == 15) stime = std::strtod(field.c_str(), nullptr);
  }
  times.own = utime + stime;
  return times;
}

struct GovernorState {
  std::optional<TeamGovernor> governor;
  std::optional<CpuTimes> last;
  double ticks_per_second = 100;
  bool announced = false;
};

GovernorState& governor_state() {
  static GovernorState state;  // one process, one stepping thread
  return state;
}

}  // namespace

int training_threads(const LaunchInfo& launch, const Environment& environment, unsigned hardware_threads) {
  const int cores = static_cast<int>(std::max(1u, hardware_threads));
  const int most = 4 * cores;
  if (int explicit_threads = thread_count(environment, "MESHRUN_THREADS", most)) return explicit_threads;
  if (int omp_threads = thread_count(environment, "OMP_NUM_THREADS", most)) return omp_threads;
  return std::max(1, cores / std::max(1, launch.local_world_size));
}

void set_training_threads(const LaunchInfo& launch, bool cpu_device) {
  const int threads = training_threads(launch, ProcessEnvironment(), std::thread::hardware_concurrency());
  torch::set_num_threads(threads);
  govern_thread_team(cpu_device ? threads : 1);
}

void govern_thread_team(int team_threads) {
  GovernorState& state = governor_state();
  state.governor.reset();
  state.last.reset();
  if (team_threads < 2 || ProcessEnvironment().get("MESHRUN_ADAPTIVE_THREADS").value_or("1") == "0") return;
  const long ticks = ::sysconf(_SC_CLK_TCK);
  if (ticks <= 0) return;
  state.ticks_per_second = static_cast<double>(ticks);
  state.last = read_cpu_times();
  if (state.last) state.governor.emplace(team_threads);
}

int adapt_training_threads() {
  GovernorState& state = governor_state();
  if (!state.governor || !state.last) return 0;
  const auto now = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(now - state.last->at).count();
  if (seconds < kMinIntervalSeconds) return state.governor->threads();
  std::optional<CpuTimes> times = read_cpu_times();
  if (!times) return state.governor->threads();  // /proc went away: keep what runs
  const double ticks = seconds * state.ticks_per_second;
  const double foreign = std::max(0.0, (times->busy - state.last->busy) - (times->own - state.last->own)) / ticks;
  state.last = times;
  const int before = state.governor->threads();
  const int after = state.governor->observe(CpuShare{times->cores, foreign});
  if (after != before) {
    torch::set_num_threads(after);
    const auto level = state.announced ? spdlog::level::debug : spdlog::level::info;
    state.announced = true;
    spdlog::log(level, "other processes used {:.1f} of this process's {} CPUs over the last {:.1f} s: {} threads "
                "now (of {}){}",
                foreign, static_cast<int>(times->cores), seconds, after, state.governor->team(),
                after < before ? "; more when the cores are free" : "");
  }
  return after;
}

TeamGovernor::TeamGovernor(int team_threads) : team_(std::max(1, team_threads)), threads_(team_) {}

int TeamGovernor::observe(const CpuShare& share) {
  ++since_growth_;
  // The threads the cores left over can hold; a quarter core of another
  // process's noise (a shell, a logger) does not cost a thread.
  const double left = share.cores - share.foreign_cores + 0.25;
  const int fit = std::clamp(static_cast<int>(std::floor(std::max(left, 1.0))), 1, team_);
  if (fit < threads_) {
    // Shrinking right after growing: the cores were not free after all.
    if (since_growth_ <= 1) probe_after_ = std::min(probe_after_ * 2, kLongestProbeWait);
    if (since_growth_ > kStableIntervals) probe_after_ = 1;
    threads_ = fit;
    free_intervals_ = 0;
    return threads_;
  }
  if (fit > threads_) {
    if (++free_intervals_ >= probe_after_) {
      threads_ = fit;
      free_intervals_ = 0;
      since_growth_ = 0;
    }
  } else {
    free_intervals_ = 0;
  }
  return threads_;
}

}  // namespace meshrun::train_detail
