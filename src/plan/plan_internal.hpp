// The planner's stages, one per source file, in the order make_plan() runs
// them: placement (placement.cpp) puts roles and engines on slots, meshes
// (mesh_plan.cpp) arrange each role's ranks, memory (memory.cpp) estimates
// each process, and fit (fit.cpp) sums slots and judges them against the
// device. Each stage reads the recipe and writes its part of the Plan.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "meshrun/plan/plan.hpp"

namespace meshrun::plan_detail {

inline constexpr int64_t kGiB = int64_t{1} << 30;
inline constexpr int64_t kMiB = int64_t{1} << 20;

// Fills plan.slots (one per rank, owners in placement order), the ranks of
// every role already in plan.roles, and plan.engines (`engine_count` engines).
// Reports plan.placement for every unit that finds no room.
void place_processes(const Recipe& recipe, int engine_count, Plan& plan, Diagnostics& diagnostics);

// The mesh over `ranks` (ascending). dp = -1 infers dp; nullopt when the
// sizes do not multiply to ranks.size() (validation reports that).
// ep must divide the dp inferred (nullopt otherwise: lint's mesh.ep-divides).
std::optional<MeshPlan> build_mesh(const std::vector<int>& ranks, int tp, int sp, int dp, int ep = 1);

// "engine 3": how an engine is named in slots, verdicts and messages.
std::string engine_name(int index);

// Memory model (docs/planning.md derives every term).
int64_t process_overhead_bytes(DeviceKind device);  // cuda 1 GiB, cpu 256 MiB
int64_t ceil_div(int64_t numerator, int64_t denominator);
// Activation elements one layer keeps per token with tensor parallelism tp.
// Every expert's parameters (3 projections each, in every sparse layer).
int64_t expert_parameter_count(const Architecture& architecture);
// ep > 1 adds the all-to-all's buffers of a sparse layer.
int64_t layer_activation_elements(const Architecture& architecture, int tp, int ep = 1);

struct WorkloadShape {
  int micro_batch = 1;          // sequences per micro-batch
  int64_t sequence_length = 0;  // tokens per sequence
  bool lm_head = true;          // false for value-head models (critic, reward)
  int64_t overhead = 0;         // bytes of runtime context per process
  bool async_checkpoint = false;  // [checkpoint] async: a state snapshot in CPU memory
};

MemoryEstimate trained_role_memory(const Architecture& architecture, int64_t parameter_count,
                                   const RolePlan& role, const MeshPlan& mesh,
                                   const WorkloadShape& workload);
MemoryEstimate inference_role_memory(const Architecture& architecture, int64_t parameter_count,
                                     const RolePlan& role, const MeshPlan& mesh,
                                     const WorkloadShape& workload);
// Adds to `m` (a trained role's estimate) a frozen reference of
// `parameter_count` computed on the role's processes; `sleeps`: it waits in
// CPU memory while the role trains (colocate.sleep).
void add_reference_memory(const Architecture& reference, int64_t parameter_count, const RolePlan& role,
                          const MeshPlan& mesh, const WorkloadShape& workload, bool sleeps, MemoryEstimate& m);

struct EngineMemory {
  MemoryEstimate memory;
  int64_t budget_bytes = 0;       // memory_utilization × capacity; 0 when capacity unknown
  int64_t kv_bytes_per_token = 0;
  int64_t kv_cache_tokens = 0;
  int64_t kv_cache_sequences = 0;
  bool fits_budget = true;  // weights + overhead + one sequence's KV ≤ budget
};
EngineMemory engine_memory(const Architecture& architecture, Precision dtype,
                           int tensor_parallel, double memory_utilization, int64_t capacity_bytes,
                           int64_t sequence_length, int64_t overhead);

// Device bytes of one slot: cluster.memory_gb GiB, 0 when unknown.
int64_t capacity_bytes(const ClusterShape& cluster);

// Fills slot peaks and plan.verdicts; reports plan.memory for each role that
// does not fit and once for the engines.
void assess_fit(const Recipe& recipe, Plan& plan, Diagnostics& diagnostics);

}  // namespace meshrun::plan_detail
