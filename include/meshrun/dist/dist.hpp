// Distributed runtime: rendezvous, process groups, collectives whose failures
// name the ranks responsible, and OLMo-core-style helpers.
//
// Runtime::init() takes one process of a job from its LaunchInfo to a world
// process group:
//   1. rank 0 starts the rendezvous store (src/dist/store_server.cpp), bound
//      to MASTER_ADDR:MASTER_PORT only. meshrun serves the store itself
//      because c10d's TCPStore listens on every interface and cannot
//      be told otherwise. A port that is taken is an immediate error.
//   2. every rank connects (retrying while rank 0 is not yet listening, up to
//      the timeout) and proves it holds the job token (MESHRUN_JOB_TOKEN, or
//      none on every process) by HMAC over a nonce the store sends; a process
//      with another token is refused before it can read or write a key, so
//      the job it tried to join is not disturbed.
//   3. every key lives under "meshrun/<job id>/" (the launcher's job id,
//      else MESHRUN_JOB_ID, else MASTER_ADDR:MASTER_PORT); each rank claims
//      "claim/<rank>" (a second claimant of a rank is refused), starts its
//      heartbeat, writes "arrived/<rank>" and waits for the others. On
//      expiry the error names the ranks that never arrived.
//   4. the world group is created (Gloo on cpu, NCCL on cuda when the build
//      has it), then, with build_groups(plan), each role's mesh axis groups
//      and each rollout engine's tensor-parallel group.
//
// Subgroups are created by their members only: each group rendezvouses under
// its own store prefix ("pg/<name>/<index>"), so a rank never takes part in
// creating a group it is not in. Every rank walks the plan's groups in the
// same order (roles in plan order, then dp, sp, tp, then engines), which
// rules out two groups waiting on each other.
//
// Failure: every collective and every group creation runs under the recipe's
// timeout. When one fails, the runtime reads the store's liveness record
// (each rank's heartbeat, stamped by the store's own clock, and the
// "exited/<rank>" key a rank writes when it leaves) and throws DistError
// naming the ranks whose heartbeat stopped, e.g. "all_reduce on group
// actor/dp (ranks 0, 2) failed after 0.4 s: rank 2 stopped responding (last
// heartbeat 1.6 s ago)". If the store itself cannot be reached, rank 0 (its
// host) is named.
//
// Seeds: Runtime::init calls torch::manual_seed(seed) on every rank, so the
// initial weights of every replica agree. Data order must differ per
// data-parallel rank: use data_seed(seed, dp_rank) for samplers and dropout
// streams that must differ.
//
// The free functions in meshrun::dist follow OLMo-core's distributed utils:
// they take an optional group (the world group of the running Runtime when
// null) and, with no Runtime, behave as a world of one process.
//
// LibTorch stays out of this header: at::Tensor and c10d::ProcessGroup are
// only declared, and c10d objects live behind pimpl.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "meshrun/launch/env.hpp"
#include "meshrun/error.hpp"
#include "meshrun/recipe/roles.hpp"

namespace at {
class Tensor;
}
namespace c10d {
class ProcessGroup;
}

namespace meshrun {

struct Recipe;
struct Plan;
class DeviceMesh;  // meshrun/dist/mesh.hpp

// Anything the runtime cannot do: rendezvous, group creation, a collective.
// The message says what was attempted, on which group, and which ranks are
// to blame when they can be told.
class DistError : public KindError<ErrorKind::dist> {
 public:
  using KindError::KindError;
};

enum class ReduceOp { sum, product, min, max };

// How to run this process's part of the job; see dist_options_from().
struct DistOptions {
  std::string device = "cpu";      // cpu | cuda
  std::string backend = "gloo";    // gloo | nccl | auto (nccl on cuda, gloo on cpu)
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  long long seed = 42;
  std::string job_id;     // empty: MASTER_ADDR:MASTER_PORT
  std::string job_token;  // empty: no token (then every process must have none)
  // Whether all nodes see one filesystem (fs_local_rank). nullopt: trivially
  // true on one node; on several, probed in shared_fs_probe_path's nearest
  // existing folder (rank 0 writes a marker file, the others look for it).
  std::optional<bool> shared_filesystem;
  std::string shared_fs_probe_path;
  // Liveness: the heartbeat period; a rank whose heartbeat is older than
  // three periods counts as stopped. Zero: derived from the timeout
  // (a tenth of it, between 100 ms and 1 s).
  std::chrono::milliseconds heartbeat_interval{0};
  // The recipe this process runs, resolved ("key = value" lines): every
  // rank's must be rank 0's, checked at the rendezvous. Empty: not checked.
  std::string recipe_keys;
};

// From the recipe ([launch] device, backend, timeout_minutes; seed;
// checkpoint.path as the shared-filesystem probe), the launcher's job id and
// the environment: MESHRUN_JOB_ID (when the launcher gives no job id),
// MESHRUN_JOB_TOKEN, MESHRUN_SHARED_FS=0/1. Throws DistError on a malformed
// MESHRUN_SHARED_FS.
DistOptions dist_options_from(const Recipe& recipe, const LaunchInfo& launch,
                              const Environment& environment);

// Seed for streams that must differ between data-parallel ranks (sampler
// order, dropout): a 63-bit mix of (seed, dp_rank), different for every
// dp_rank of one seed and unrelated to the seeds of neighbouring seeds.
std::uint64_t data_seed(long long seed, int dp_rank);

namespace dist_detail {
struct GroupState;
class RuntimeState;
struct PendingState;
}  // namespace dist_detail

// A collective started by one of Group's *_async functions (gradient
// buckets overlapped with backward). wait() blocks until it is done and
// throws DistError like the synchronous forms; a second wait() does nothing.
// A default-constructed one is already done.
class PendingCollective {
 public:
  PendingCollective() = default;
  explicit PendingCollective(std::shared_ptr<dist_detail::PendingState> state);
  void wait();
  bool waited() const;
  // Without blocking: whether it has finished (then wait() returns at once,
  // or throws its failure).
  bool ready() const;

 private:
  std::shared_ptr<dist_detail::PendingState> state_;
};

// A process group this process belongs to. A cheap handle: copies share the
// group. Group ranks are positions in ranks(); collectives must be called by
// every member in the same order.
class Group {
 public:
  // "world", "actor", "actor/dp", "engine 0/tp".
  const std::string& name() const;
  const std::vector<int>& ranks() const;  // global ranks, group-rank order
  int rank() const;                       // this process's group rank
  int size() const;
  int global_rank(int group_rank) const;
  std::string backend() const;  // gloo | nccl
  std::string device() const;   // "cpu", "cuda:0": where its tensors must live

  void barrier();
  void all_reduce(at::Tensor& tensor, ReduceOp op = ReduceOp::sum);
  void broadcast(at::Tensor& tensor, int src_group_rank = 0);
  // One tensor per member, in group-rank order (equal shapes required).
  std::vector<at::Tensor> all_gather(const at::Tensor& tensor);
  // The members' tensors concatenated along dim 0.
  at::Tensor all_gather_into_tensor(const at::Tensor& tensor);
  // input's dim 0 split into size() equal chunks; returns this rank's chunk
  // of the reduction.
  at::Tensor reduce_scatter(const at::Tensor& input, ReduceOp op = ReduceOp::sum);
  // Expert parallelism's dispatch: rows [Σ send_rows[..r), +send_rows[r])
  // of `input` go to group rank r, and the result holds, in group-rank
  // order, the receive_rows[r] rows rank r sent here (every member's
  // send_rows[me] must equal my receive_rows[it]). Both lists have size()
  // entries; a zero sends or receives nothing.
  at::Tensor all_to_all(const at::Tensor& input, const std::vector<int64_t>& send_rows,
                        const std::vector<int64_t>& receive_rows);

  // Asynchronous forms, into caller-owned buffers that must stay alive and
  // untouched until wait(). Members must start them in the same order.
  // all_reduce_async reduces `tensor` in place.
  PendingCollective all_reduce_async(at::Tensor& tensor, ReduceOp op = ReduceOp::sum);
  // `output` (input.size(0) / size() rows) receives this rank's chunk of the
  // reduction; `input` may be overwritten (Gloo reduces it in place).
  PendingCollective reduce_scatter_async(at::Tensor& input, at::Tensor& output, ReduceOp op = ReduceOp::sum);
  // `output` (size() * input.size(0) rows) receives the members' inputs in
  // group-rank order; `input` may be this rank's chunk of `output`.
  PendingCollective all_gather_into_tensor_async(at::Tensor& output, const at::Tensor& input);

  // The c10d group, for code that needs it directly (DDP-style reducers).
  c10d::ProcessGroup& native();

  explicit Group(std::shared_ptr<dist_detail::GroupState> state);

 private:
  std::shared_ptr<dist_detail::GroupState> state_;
};

// One process's membership in the job. At most one Runtime exists in a
// process at a time; while it does, it is Runtime::current().
class Runtime {
 public:
  // Rendezvous and world group (steps 1-4 above); throws DistError.
  static std::unique_ptr<Runtime> init(const LaunchInfo& launch, const DistOptions& options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  static Runtime* current();

  const LaunchInfo& launch() const;
  const DistOptions& options() const;  // backend resolved to gloo or nccl
  std::string job_prefix() const;      // "meshrun/<job id>"
  Group& world();
  bool shared_filesystem() const;

  // Creates the groups of every role and rollout engine this rank holds
  // (see the top of this file). Call once, on every rank, with the plan
  // every rank computed.
  void build_groups(const Plan& plan);
  // Every role of the plan, holding this rank or not (ranks ↔ coordinates
  // are known for all; groups only where this rank is a member).
  const std::vector<DeviceMesh>& meshes() const;
  DeviceMesh& mesh(Role role);  // throws DistError for a role the plan has not
  DeviceMesh* find_mesh(Role role);
  // The tensor-parallel group of rollout engine `index`; nullptr when this
  // rank is not one of its ranks.
  Group* engine_group(int index);
  // (engine index, group) for every engine this rank serves.
  std::vector<std::pair<int, Group*>> engine_groups();
  // Every group this rank belongs to, in creation order (world first).
  std::vector<Group*> groups();

  // Leaves the job: writes "exited/<rank>" = reason, stops the heartbeat and
  // tears the groups down. Rank 0 keeps the store up until every other rank
  // has left or stopped responding (at most the timeout), so that their
  // last errors can still name ranks. Called by the destructor when not
  // called before (reason "finished", or the last collective failure).
  void shutdown(std::string_view reason = "finished");

  dist_detail::RuntimeState& state();

 private:
  explicit Runtime(std::unique_ptr<dist_detail::RuntimeState> state);
  std::unique_ptr<dist_detail::RuntimeState> state_;
};

// Whether this build can use the NCCL backend (LibTorch built with CUDA and
// meshrun with USE_C10D_NCCL).
bool build_has_nccl();
// A sentence naming this build's LibTorch and its backends, for errors and
// `meshrun check`.
std::string build_description();
// `meshrun --version`'s facts after its first line, one per line, each led
// by its word: "torch 2.11.0", "cuda: compiled (CUDA 13.0), 1 GPUs visible"
// or "cuda: not compiled", "nccl: compiled (NCCL 2.28.9)" or "nccl: not
// compiled". Counts GPUs, so it may initialise the CUDA driver.
std::string build_facts();
// The total memory of the smallest CUDA device this process sees, in GiB; 0
// without CUDA or without a visible GPU. Device properties only (no context).
double visible_gpu_memory_gib();

// OLMo-core-style helpers. `group` null: the running Runtime's world group,
// or a world of one when there is no Runtime.
namespace dist {

bool is_distributed();  // a Runtime is running
int rank(const Group* group = nullptr);
int world_size(const Group* group = nullptr);
int local_rank();        // from the launcher; 0 without a Runtime
int local_world_size();  // 1 without a Runtime
int num_nodes();         // 1 without a Runtime
// The rank among the processes that share a filesystem: rank() when every
// node sees the same filesystem, local_rank() otherwise (0 without a Runtime).
int fs_local_rank();
void barrier(Group* group = nullptr);

std::int64_t all_reduce_value(std::int64_t value, ReduceOp op = ReduceOp::sum, Group* group = nullptr);
double all_reduce_value(double value, ReduceOp op = ReduceOp::sum, Group* group = nullptr);
template <std::integral T>
T all_reduce_value(T value, ReduceOp op = ReduceOp::sum, Group* group = nullptr) {
  return static_cast<T>(all_reduce_value(static_cast<std::int64_t>(value), op, group));
}
template <std::floating_point T>
  requires(!std::same_as<T, double>)
T all_reduce_value(T value, ReduceOp op = ReduceOp::sum, Group* group = nullptr) {
  return static_cast<T>(all_reduce_value(static_cast<double>(value), op, group));
}

// Group rank 0's value on every member.
std::int64_t synchronize_value(std::int64_t value, Group* group = nullptr);
double synchronize_value(double value, Group* group = nullptr);
std::string synchronize_value(const std::string& value, Group* group = nullptr);
template <std::integral T>
T synchronize_value(T value, Group* group = nullptr) {
  return static_cast<T>(synchronize_value(static_cast<std::int64_t>(value), group));
}
bool synchronize_flag(bool flag, Group* group = nullptr);

// `src` group rank's bytes on every member.
std::string broadcast_object(const std::string& bytes, int src = 0, Group* group = nullptr);
std::vector<at::Tensor> all_gather(const at::Tensor& tensor, Group* group = nullptr);
std::vector<std::string> all_gather_object(const std::string& bytes, Group* group = nullptr);

// Runs fn on every member exactly once, at most n members at a time (n <= 0:
// one per node), in waves separated by barriers; returns fn's result.
template <class F>
auto do_n_at_a_time(F&& fn, int n = 0, Group* group = nullptr) -> std::invoke_result_t<F&> {
  using Result = std::invoke_result_t<F&>;
  const int size = world_size(group);
  const int members_at_once = n > 0 ? n : num_nodes();
  const int waves = (size + members_at_once - 1) / members_at_once;
  const int my_wave = rank(group) % waves;
  if constexpr (std::is_void_v<Result>) {
    for (int wave = 0; wave < waves; ++wave) {
      if (wave == my_wave) fn();
      barrier(group);
    }
  } else {
    std::optional<Result> result;
    for (int wave = 0; wave < waves; ++wave) {
      if (wave == my_wave) result.emplace(fn());
      barrier(group);
    }
    return std::move(*result);
  }
}

}  // namespace dist

// `meshrun check RECIPE`: rendezvous, build every group of the plan, then on
// each group this rank holds run all_reduce, all_gather and broadcast of
// rank-dependent values and compare them with what the group's rank list
// implies. Reports from all ranks are merged, so every rank (rank 0 prints)
// gets every group of the job.
struct GroupCheck {
  std::string name;
  std::vector<int> ranks;
  std::vector<std::string> passed;  // "barrier", "all_reduce", "all_gather", "broadcast"
  double seconds = 0;               // the slowest member's time
};

struct SelfCheckReport {
  int world_size = 1;
  std::string backend;
  std::string device;
  std::string job_prefix;
  double rendezvous_seconds = 0;  // this rank's init
  std::vector<GroupCheck> groups;  // world first, then in creation order
};

// On a runtime whose groups are built. Throws DistError (which group, which
// op, expected vs got) on a wrong result.
SelfCheckReport self_check(Runtime& runtime);
// Init from the recipe and launch info, build the plan's groups, check, shut
// down cleanly.
SelfCheckReport self_check(const Recipe& recipe, const Plan& plan, const LaunchInfo& launch,
                           const Environment& environment);
std::string format_self_check_report(const SelfCheckReport& report);

}  // namespace meshrun
