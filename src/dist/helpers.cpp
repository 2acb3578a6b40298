// OLMo-core-style helpers over the current Runtime's groups, each falling
// back to a world of one when no Runtime runs; options from a recipe; seeds.
#include <algorithm>
#include <cstring>

#include "meshrun/recipe/recipe.hpp"
#include "meshrun/recipe/resolved.hpp"
#include "runtime_state.hpp"

namespace meshrun {
namespace {

Group* resolve(Group* group) {
  if (group) return group;
  Runtime* runtime = Runtime::current();
  return runtime ? &runtime->world() : nullptr;
}

at::TensorOptions options_on(const Group& group, at::ScalarType type) {
  return at::TensorOptions().dtype(type).device(c10::Device(group.device()));
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

DistOptions dist_options_from(const Recipe& recipe, const LaunchInfo& launch, const Environment& environment) {
  DistOptions options;
  options.device = recipe.launch.device;
  options.backend = recipe.launch.backend;
  // Saturated at a century: a larger double does not fit the milliseconds'
  // integer (and deadlines add it to now()); the schema allows a week.
  constexpr double kLongestTimeoutMs = 100.0 * 365 * 24 * 3600 * 1000;
  options.timeout = std::chrono::milliseconds(
      static_cast<long long>(std::min(recipe.launch.timeout_minutes * 60'000.0, kLongestTimeoutMs)));
  options.seed = recipe.seed;
  options.job_id = !launch.job_id.empty() ? launch.job_id : environment.get("MESHRUN_JOB_ID").value_or("");
  options.job_token = environment.get("MESHRUN_JOB_TOKEN").value_or("");
  options.shared_fs_probe_path = recipe.checkpoint.path;
  for (const ResolvedKey& key : resolved_keys(recipe)) options.recipe_keys += key.key + " = " + key.value + "\n";
  if (auto shared = environment.get("MESHRUN_SHARED_FS")) {
    if (*shared == "1" || *shared == "true")
      options.shared_filesystem = true;
    else if (*shared == "0" || *shared == "false")
      options.shared_filesystem = false;
    else
      throw DistError("MESHRUN_SHARED_FS='" + *shared + "': use 1 (all nodes share one filesystem) or 0");
  }
  return options;
}

std::uint64_t data_seed(long long seed, int dp_rank) {
  // Two rounds keep (seed, dp_rank) and (seed + 1, dp_rank - 1) apart.
  const std::uint64_t mixed = splitmix64(splitmix64(static_cast<std::uint64_t>(seed)) ^ static_cast<std::uint64_t>(dp_rank));
  return mixed >> 1;  // 63 bits: fits a signed 64-bit seed as well
}

bool build_has_nccl() { return dist_detail::compat::kHasNccl; }

std::string build_description() {
  namespace compat = dist_detail::compat;
  return "torch " + compat::torch_version() + ", backends: gloo" +
         (compat::kHasNccl ? ", nccl " + compat::nccl_version() : "") +
         (compat::kHasCuda ? ", with CUDA " + compat::cuda_version() : ", CPU only");
}

double visible_gpu_memory_gib() {
  namespace compat = dist_detail::compat;
  double smallest = 0;
  for (int device = 0; device < compat::visible_gpus(); ++device) {
    const double gib = static_cast<double>(compat::device_total_memory(device)) / (1024.0 * 1024.0 * 1024.0);
    if (smallest == 0 || gib < smallest) smallest = gib;
  }
  return smallest;
}

std::string build_facts() {
  namespace compat = dist_detail::compat;
  std::string facts = "torch " + compat::torch_version() + "\n";
  facts += compat::kHasCuda ? "cuda: compiled (CUDA " + compat::cuda_version() + "), " +
                                  std::to_string(compat::visible_gpus()) + " GPUs visible\n"
                            : "cuda: not compiled\n";
  facts += compat::kHasNccl ? "nccl: compiled (NCCL " + compat::nccl_version() + ")" : "nccl: not compiled";
  return facts;
}

namespace dist {

bool is_distributed() { return Runtime::current() != nullptr; }

int rank(const Group* group) {
  const Group* resolved = resolve(const_cast<Group*>(group));
  return resolved ? resolved->rank() : 0;
}

int world_size(const Group* group) {
  const Group* resolved = resolve(const_cast<Group*>(group));
  return resolved ? resolved->size() : 1;
}

int local_rank() {
  Runtime* runtime = Runtime::current();
  return runtime ? runtime->launch().local_rank : 0;
}

int local_world_size() {
  Runtime* runtime = Runtime::current();
  return runtime ? runtime->launch().local_world_size : 1;
}

int num_nodes() {
  Runtime* runtime = Runtime::current();
  return runtime ? runtime->launch().nodes : 1;
}

int fs_local_rank() {
  Runtime* runtime = Runtime::current();
  if (!runtime) return 0;
  return runtime->shared_filesystem() ? runtime->launch().rank : runtime->launch().local_rank;
}

void barrier(Group* group) {
  if (Group* resolved = resolve(group)) resolved->barrier();
}

std::int64_t all_reduce_value(std::int64_t value, ReduceOp op, Group* group) {
  Group* resolved = resolve(group);
  if (!resolved) return value;
  at::Tensor tensor = at::full({1}, value, options_on(*resolved, at::kLong));
  resolved->all_reduce(tensor, op);
  return tensor.item<std::int64_t>();
}

double all_reduce_value(double value, ReduceOp op, Group* group) {
  Group* resolved = resolve(group);
  if (!resolved) return value;
  at::Tensor tensor = at::full({1}, value, options_on(*resolved, at::kDouble));
  resolved->all_reduce(tensor, op);
  return tensor.item<double>();
}

std::int64_t synchronize_value(std::int64_t value, Group* group) {
  Group* resolved = resolve(group);
  if (!resolved) return value;
  at::Tensor tensor = at::full({1}, value, options_on(*resolved, at::kLong));
  resolved->broadcast(tensor, 0);
  return tensor.item<std::int64_t>();
}

double synchronize_value(double value, Group* group) {
  Group* resolved = resolve(group);
  if (!resolved) return value;
  at::Tensor tensor = at::full({1}, value, options_on(*resolved, at::kDouble));
  resolved->broadcast(tensor, 0);
  return tensor.item<double>();
}

std::string synchronize_value(const std::string& value, Group* group) { return broadcast_object(value, 0, group); }

bool synchronize_flag(bool flag, Group* group) { return synchronize_value(std::int64_t{flag ? 1 : 0}, group) != 0; }

std::string broadcast_object(const std::string& bytes, int src, Group* group) {
  Group* resolved = resolve(group);
  if (!resolved) return bytes;
  at::Tensor length = at::full({1}, static_cast<std::int64_t>(bytes.size()), options_on(*resolved, at::kLong));
  resolved->broadcast(length, src);
  const std::int64_t size = length.item<std::int64_t>();
  if (size == 0) return {};
  at::Tensor payload = at::empty({size}, at::TensorOptions().dtype(at::kByte));
  if (resolved->rank() == src) std::memcpy(payload.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  payload = payload.to(c10::Device(resolved->device()));
  resolved->broadcast(payload, src);
  payload = payload.cpu();
  return std::string(reinterpret_cast<const char*>(payload.data_ptr<std::uint8_t>()), static_cast<size_t>(size));
}

std::vector<at::Tensor> all_gather(const at::Tensor& tensor, Group* group) {
  Group* resolved = resolve(group);
  if (!resolved) return {tensor.clone()};
  return resolved->all_gather(tensor);
}

std::vector<std::string> all_gather_object(const std::string& bytes, Group* group) {
  Group* resolved = resolve(group);
  if (!resolved) return {bytes};
  at::Tensor length = at::full({1}, static_cast<std::int64_t>(bytes.size()), options_on(*resolved, at::kLong));
  std::vector<at::Tensor> lengths = resolved->all_gather(length);
  std::int64_t longest = 0;
  for (const auto& each : lengths) longest = std::max(longest, each.cpu().item<std::int64_t>());
  // Equal shapes are required: pad every payload to the longest.
  at::Tensor payload = at::zeros({std::max<std::int64_t>(longest, 1)}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(payload.data_ptr<std::uint8_t>(), bytes.data(), bytes.size());
  std::vector<at::Tensor> payloads = resolved->all_gather(payload.to(c10::Device(resolved->device())));
  std::vector<std::string> result;
  for (size_t i = 0; i < payloads.size(); ++i) {
    at::Tensor on_cpu = payloads[i].cpu();
    result.emplace_back(reinterpret_cast<const char*>(on_cpu.data_ptr<std::uint8_t>()),
                        static_cast<size_t>(lengths[i].cpu().item<std::int64_t>()));
  }
  return result;
}

}  // namespace dist
}  // namespace meshrun
