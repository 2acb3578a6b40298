// How many intra-op threads a training process uses, and how that number
// follows the CPU the process actually gets. Used by the trainers (through
// the run shell) and by `meshrun generate`.
//
// A team of OpenMP threads pays only while its members have cores of their
// own: `meshrun` starts the engine with a short spin before each wait
// (engine_handoff.cpp), which keeps a team that owns its cores from
// sleeping and waking at every parallel region (2-3x on a 2-core VM), but
// a team that shares its cores with another busy process then waits on a
// descheduled member and runs several times slower than its share. The
// governor below measures, between steps, how much of the process's CPUs
// other processes used and shrinks the team to the cores left (down to one
// thread: no team, nothing to wait for), growing it again when they are
// free. Invariant: the thread count stays within [1, the configured count].
#pragma once

#include <optional>

#include "meshrun/launch/env.hpp"

namespace meshrun::train_detail {

// The machine's cores shared out among the processes of this node (at
// least one each), unless OMP_NUM_THREADS or MESHRUN_THREADS says
// otherwise: LibTorch would otherwise start one thread per core in every
// process, and local_world_size processes would fight over the cores. A
// malformed count, or one above 4 × hardware_threads, is a LaunchEnvError
// naming the variable.
int training_threads(const LaunchInfo& launch, const Environment& environment, unsigned hardware_threads);

// Sets the training threads of the calling thread and, for a CPU job whose
// team has more than one thread, starts the governor (unless
// MESHRUN_ADAPTIVE_THREADS=0).
void set_training_threads(const LaunchInfo& launch, bool cpu_device);

// Starts the governor for a CPU team of `team_threads` (already set with
// at::set_num_threads on the calling thread), unless the team is one
// thread or MESHRUN_ADAPTIVE_THREADS=0; stops any governor before.
void govern_thread_team(int team_threads);

// Called by the run shell after each step (and by `meshrun generate`
// between decode steps), on the thread that runs the
// steps (OpenMP's team size is that thread's setting). Samples /proc at
// most once a second and applies the governor's choice. Returns the
// thread count now in use, or 0 when no governor runs.
int adapt_training_threads();

// One interval of the CPUs this process may run on.
struct CpuShare {
  double cores = 0;          // CPUs in the process's affinity mask
  double foreign_cores = 0;  // their busy time not spent by this process, per second of the interval
};

// The decision, apart from /proc so that it can be tested. Shrinks at once
// to the cores other processes leave; grows only after the cores stayed
// free for `probe_after` intervals, a wait that doubles (to 32 intervals)
// each time a grown team had to shrink again at the next interval, so two
// jobs taking turns do not flip every interval, and starts again at one
// when a team that held a while meets new contention.
class TeamGovernor {
 public:
  explicit TeamGovernor(int team_threads);

  int team() const { return team_; }
  int threads() const { return threads_; }
  int probe_after() const { return probe_after_; }
  // The thread count for the next interval.
  int observe(const CpuShare& share);

 private:
  int team_;
  int threads_;
  int probe_after_ = 1;
  int free_intervals_ = 0;    // consecutive intervals in which more threads would have fit
  int since_growth_ = 1000;   // intervals since the team last grew
};

}  // namespace meshrun::train_detail
