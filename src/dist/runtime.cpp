// Runtime::init (rendezvous to world group), group creation, failure
// explanation and shutdown; see meshrun/dist/dist.hpp for the sequence.
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "meshrun/dist/dist.hpp"
#include "meshrun/dist/mesh.hpp"
#include "meshrun/plan/plan.hpp"
#include "rendezvous.hpp"
#include "runtime_state.hpp"

namespace meshrun {
namespace dist_detail {
namespace {

void check_launch(const LaunchInfo& launch) {
  if (launch.needs_mpi_bootstrap || launch.master_addr.empty())
    throw DistError("no master address: set MASTER_ADDR to the host of rank 0, or let an MPI launch complete it "
                    "first with complete_mpi_bootstrap() (meshrun run/check do)");
  if (launch.world_size < 1 || launch.rank < 0 || launch.rank >= launch.world_size)
    throw DistError("rank " + std::to_string(launch.rank) + " is outside a world of " +
                    std::to_string(launch.world_size));
  check_port(launch.master_port, launch.master_port_source.empty() ? "MASTER_PORT" : launch.master_port_source);
}

DistOptions resolve_backend(DistOptions options) {
  if (options.device != "cpu" && options.device != "cuda")
    throw DistError("unknown device '" + options.device + "': cpu or cuda");
  if (options.backend == "auto") options.backend = options.device == "cuda" ? "nccl" : "gloo";
  if (options.backend != "gloo" && options.backend != "nccl")
    throw DistError("unknown backend '" + options.backend + "': gloo, nccl or auto");
  if (options.backend == "nccl" && options.device != "cuda")
    throw DistError("the nccl backend needs launch.device = \"cuda\"; use gloo on cpu");
  if (options.backend == "nccl") compat::require_nccl();
  if (options.timeout <= std::chrono::milliseconds::zero()) throw DistError("the timeout must be positive");
  return options;
}

std::chrono::milliseconds heartbeat_interval_for(const DistOptions& options) {
  if (options.heartbeat_interval > std::chrono::milliseconds::zero()) return options.heartbeat_interval;
  return std::clamp(options.timeout / 10, std::chrono::milliseconds(100), std::chrono::milliseconds(1000));
}

std::vector<int> iota_ranks(int count) {
  std::vector<int> ranks(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) ranks[static_cast<size_t>(i)] = i;
  return ranks;
}

bool contains(const std::vector<int>& ranks, int rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}

// Rank 0 leaves a marker where the checkpoints go; ranks that can see it
// share rank 0's filesystem.
bool probe_shared_filesystem(const std::string& probe_path, Group& world) {
  namespace fs = std::filesystem;
  std::string marker;
  if (world.rank() == 0) {
    std::error_code error;
    fs::path folder = probe_path.empty() ? fs::current_path() : fs::absolute(probe_path);
    while (!fs::is_directory(folder, error) && folder.has_parent_path() && folder != folder.parent_path())
      folder = folder.parent_path();
    std::random_device device;
    marker = (folder / (".meshrun-shared-fs-" + std::to_string(device()) + std::to_string(device()))).string();
    std::ofstream(marker) << "meshrun shared-filesystem probe\n";
  }
  marker = dist::broadcast_object(marker, 0, &world);
  const bool seen = std::filesystem::exists(marker);
  const bool shared = dist::all_reduce_value(std::int64_t{seen ? 1 : 0}, ReduceOp::min, &world) == 1;
  if (world.rank() == 0) {
    std::error_code ignored;
    std::filesystem::remove(marker, ignored);
  }
  return shared;
}

}  // namespace

std::vector<int> GroupState::peers() const {
  std::vector<int> others;
  for (int member : ranks)
    if (member != global_rank) others.push_back(member);
  return others;
}

RuntimeState& GroupState::owner() const {
  if (!runtime) throw DistError("group " + name + " was closed when its runtime shut down");
  return *runtime;
}

std::string first_line(const std::string& text) {
  const auto end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

DistError RuntimeState::failure_of(const GroupState& group, std::string_view operation, Clock::time_point began,
                                   const std::string& native_error) {
  const Clock::time_point failed_at = Clock::now();
  const double elapsed = std::chrono::duration<double>(failed_at - began).count();
  const double limit = std::chrono::duration<double>(timeout()).count();
  const bool timed_out = elapsed >= 0.95 * limit;
  // A fresh failure (a peer's socket closed) comes before its heartbeat goes
  // stale: wait for that long, but not past the operation's own timeout.
  const Clock::time_point give_up =
      std::max(failed_at, std::min(failed_at + stale_after + heartbeat_interval, began + timeout()));
  const std::string subject = operation == kCreating ? "creating group " + group.name
                                                    : std::string(operation) + " on group " + group.name;
  std::string why = liveness ? liveness->explain(group.peers(), give_up, subject) : std::string("no liveness record");
  std::string message = subject + " (" + describe_ranks(group.ranks) + ") " + (timed_out ? "timed out after " + format_seconds(limit)
                                          : "failed after " + format_seconds(elapsed)) +
                        ": " + why + " [" + group.backend + ": " + first_line(native_error) + "]";
  if (failure.empty()) failure = message;
  return DistError(message);
}

void RuntimeState::note_silent_peers(const std::string& reason) {
  std::lock_guard lock(silent_mutex_);
  if (silent_peers_.empty()) silent_peers_ = reason;
}

void RuntimeState::refuse_if_a_peer_is_silent(const GroupState& group, std::string_view operation) {
  std::string reason;
  {
    std::lock_guard lock(silent_mutex_);
    reason = silent_peers_;
  }
  if (reason.empty()) return;
  std::string message = std::string(operation) + " on group " + group.name + " (" + describe_ranks(group.ranks) +
                        ") not started: " + reason + ", longer than the timeout of " +
                        format_seconds(std::chrono::duration<double>(timeout()).count());
  if (failure.empty()) failure = message;
  throw DistError(message);
}

Group RuntimeState::create_group(std::string name, std::string store_name, std::vector<int> ranks) {
  auto group = std::make_shared<GroupState>();
  group->name = std::move(name);
  group->store_name = std::move(store_name);
  group->ranks = std::move(ranks);
  group->global_rank = launch.rank;
  group->rank = static_cast<int>(std::find(group->ranks.begin(), group->ranks.end(), launch.rank) - group->ranks.begin());
  group->backend = options.backend;
  group->device = options.backend == "nccl" ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(launch.local_rank))
                                            : c10::Device(c10::kCPU);
  group->runtime = this;
  const int size = static_cast<int>(group->ranks.size());
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(keys.group(group->store_name), store);
  group->native = run(*group, kCreating, [&] {
    return options.backend == "nccl" ? compat::make_nccl_group(prefixed, group->rank, size, timeout())
                                     : compat::make_gloo_group(prefixed, group->rank, size, timeout(), local_address);
  });
  groups.push_back(group);
  return Group(group);
}

void RuntimeState::linger_for_peers() {
  std::vector<int> others;
  for (int rank = 1; rank < launch.world_size; ++rank) others.push_back(rank);
  const Clock::time_point deadline = Clock::now() + timeout();
  while (!others.empty() && Clock::now() < deadline) {
    std::vector<PeerStatus> statuses;
    try {
      statuses = liveness->read(others);
    } catch (const std::exception&) {
      return;
    }
    std::vector<int> still_here;
    for (const auto& peer : statuses)
      if (peer.state == PeerStatus::State::responsive) still_here.push_back(peer.rank);
    others = std::move(still_here);
    if (!others.empty()) std::this_thread::sleep_for(heartbeat_interval / 2);
  }
}

void RuntimeState::shutdown(std::string_view reason) {
  if (shut_down) return;
  shut_down = true;
  if (joined && store) {
    try {
      store->set_text(keys.exited(launch.rank), std::string(reason));
    } catch (const std::exception&) {
      // The store is gone with rank 0; nobody is left to tell.
    }
  }
  // Closing the groups first lets peers blocked on this rank fail now
  // rather than at their timeout.
  engines.clear();
  meshes.clear();
  mesh_roles.clear();
  world.reset();
  for (auto& group : groups) {
    group->native.reset();
    group->runtime = nullptr;
  }
  groups.clear();
  if (server && joined && liveness) linger_for_peers();
  heartbeat.reset();
  liveness.reset();
  store.reset();
  server.reset();
}

RuntimeState::~RuntimeState() { shutdown(failure.empty() ? "finished" : "failed: " + failure); }

}  // namespace dist_detail

using dist_detail::Clock;
using dist_detail::RuntimeState;

Runtime::Runtime(std::unique_ptr<RuntimeState> state) : state_(std::move(state)) {}

Runtime::~Runtime() {
  shutdown(state_->failure.empty() ? "finished" : "failed: " + state_->failure);
}

Runtime* Runtime::current() { return dist_detail::current_runtime.load(); }

std::unique_ptr<Runtime> Runtime::init(const LaunchInfo& launch, const DistOptions& options) {
  using namespace dist_detail;
  if (current_runtime.load())
    throw DistError("a meshrun runtime is already running in this process: shut it down first");
  check_launch(launch);
  auto state = std::make_unique<RuntimeState>();
  state->launch = launch;
  state->options = resolve_backend(options);
  state->started = Clock::now();
  state->heartbeat_interval = heartbeat_interval_for(state->options);
  state->stale_after = 3 * state->heartbeat_interval;
  state->master = endpoint_text(launch.master_addr, launch.master_port);
  state->keys = job_keys_for(state->options.job_id, state->master);
  RuntimeState& s = *state;
  std::unique_ptr<Runtime> runtime(new Runtime(std::move(state)));
  try {
    if (s.options.device == "cuda") compat::set_cuda_device(launch.local_rank);
    torch::manual_seed(static_cast<uint64_t>(s.options.seed));

    // A world of one needs no agreed address: a free loopback port avoids
    // colliding with another single-process run on the same machine.
    const bool alone = launch.world_size == 1;
    StoreEndpoint endpoint{alone ? std::string("127.0.0.1") : launch.master_addr, alone ? 0 : launch.master_port,
                           s.options.job_token, launch.rank};
    if (launch.rank == 0) {
      s.server = std::make_unique<StoreServer>(endpoint.host, endpoint.port, s.options.job_token);
      endpoint.port = s.server->port();
    }
    const Clock::time_point deadline = s.started + s.timeout();
    s.store = StoreClient::connect(endpoint, s.timeout(), deadline);
    s.local_address = s.store->local_address();
    const std::string identity = process_identity();
    claim_rank(*s.store, s.keys, launch.rank, identity);
    s.joined = true;
    // A rank silent for a whole timeout stops the job even where no
    // collective of this rank waits on it (its heartbeat alone was lost).
    PeerWatch watch;
    for (int rank = 0; rank < launch.world_size; ++rank)
      if (rank != launch.rank) watch.ranks.push_back(rank);
    watch.keys = s.keys;
    watch.silent_after = s.timeout();
    RuntimeState* state = &s;
    watch.on_silent = [state](const std::string& reason) { state->note_silent_peers(reason); };
    s.heartbeat = std::make_unique<Heartbeat>(StoreClient::connect(endpoint, s.timeout(), deadline),
                                              s.keys.heartbeat(launch.rank), s.heartbeat_interval, std::move(watch));
    s.liveness = std::make_unique<LivenessMonitor>(s.store, s.keys, s.heartbeat_interval, s.stale_after);
    publish_recipe(*s.store, s.keys, launch.rank, s.options.recipe_keys);
    announce_arrival(*s.store, s.keys, launch.rank, identity);
    wait_for_arrivals(*s.store, s.keys, launch.world_size, deadline, s.timeout(), s.master);
    agree_on_recipe(*s.store, s.keys, launch.rank, launch.world_size, s.options.recipe_keys, deadline);

    s.world = s.create_group("world", "world", iota_ranks(launch.world_size));
    s.init_seconds = std::chrono::duration<double>(Clock::now() - s.started).count();
    current_runtime.store(runtime.get());
    if (s.options.shared_filesystem)
      s.shared_filesystem = *s.options.shared_filesystem;
    else
      s.shared_filesystem = launch.nodes <= 1 || probe_shared_filesystem(s.options.shared_fs_probe_path, *s.world);
  } catch (const std::exception& error) {
    if (s.failure.empty()) s.failure = error.what();
    runtime->shutdown("failed: " + s.failure);
    if (dynamic_cast<const DistError*>(&error)) throw;
    throw DistError(std::string("rendezvous failed: ") + error.what());
  }
  return runtime;
}

const LaunchInfo& Runtime::launch() const { return state_->launch; }
const DistOptions& Runtime::options() const { return state_->options; }
std::string Runtime::job_prefix() const { return state_->keys.prefix; }
bool Runtime::shared_filesystem() const { return state_->shared_filesystem; }
dist_detail::RuntimeState& Runtime::state() { return *state_; }

Group& Runtime::world() {
  if (!state_->world) throw DistError("the runtime has shut down");
  return *state_->world;
}

void Runtime::build_groups(const Plan& plan) {
  using dist_detail::contains;
  auto& s = *state_;
  if (s.groups_built) throw DistError("Runtime::build_groups was already called");
  if (!s.world) throw DistError("the runtime has shut down");
  const int rank = s.launch.rank;
  for (const RolePlan& role : plan.roles) {
    DeviceMesh& mesh = s.meshes.emplace_back(role.name, role.mesh, rank);
    s.mesh_roles.push_back(role.role);
    if (!mesh.holds_this_rank()) continue;
    mesh.attach_role_group(s.create_group(role.name, role.name, role.mesh.ranks));
    for (MeshAxis axis : kMeshAxes) {
      const int index = mesh.axis_group_index(axis);
      mesh.attach(axis, s.create_group(mesh.group_name(axis), mesh.group_name(axis) + "/" + std::to_string(index),
                                       mesh.axis_ranks(axis)));
    }
    if (mesh.sp() > 1) {
      const std::string name = role.name + "/dp*sp";
      mesh.attach_replica_group(
          s.create_group(name, name + "/" + std::to_string(mesh.coordinate(MeshAxis::tp)), mesh.replica_ranks()));
    }
    if (mesh.ep() > 1) {
      const MeshPlan::Coordinate at = mesh.coordinate();
      const std::string ep = role.name + "/ep", experts = role.name + "/experts";
      mesh.attach_expert_groups(
          s.create_group(ep, ep + "/" + std::to_string((at.tp * mesh.sp() + at.sp) * (mesh.dp() / mesh.ep()) + at.dp / mesh.ep()),
                         mesh.expert_parallel_ranks()),
          s.create_group(experts, experts + "/" + std::to_string(at.tp * mesh.ep() + mesh.ep_rank()),
                         mesh.expert_replica_ranks()));
    }
  }
  std::string roles;
  for (const DeviceMesh& mesh : s.meshes)
    if (mesh.holds_this_rank()) roles += (roles.empty() ? "" : ", ") + mesh.role();
  for (const EnginePlan& engine : plan.engines) {
    if (!contains(engine.ranks, rank)) continue;
    const std::string name = "engine " + std::to_string(engine.index) + "/tp";
    s.engines.emplace(engine.index, s.create_group(name, "engine/" + std::to_string(engine.index) + "/tp", engine.ranks));
    roles += (roles.empty() ? "" : ", ") + ("rollout engine " + std::to_string(engine.index));
  }
  if (s.heartbeat) s.heartbeat->set_roles(roles);
  s.groups_built = true;
}

const std::vector<DeviceMesh>& Runtime::meshes() const { return state_->meshes; }

DeviceMesh* Runtime::find_mesh(Role role) {
  auto& s = *state_;
  for (size_t i = 0; i < s.meshes.size(); ++i)
    if (s.mesh_roles[i] == role) return &s.meshes[i];
  return nullptr;
}

DeviceMesh& Runtime::mesh(Role role) {
  if (DeviceMesh* found = find_mesh(role)) return *found;
  throw DistError("the plan has no role '" + std::string(role_name(role)) + "'" +
                  (state_->groups_built ? "" : " (Runtime::build_groups has not been called)"));
}

Group* Runtime::engine_group(int index) {
  auto found = state_->engines.find(index);
  return found == state_->engines.end() ? nullptr : &found->second;
}

std::vector<std::pair<int, Group*>> Runtime::engine_groups() {
  std::vector<std::pair<int, Group*>> result;
  for (auto& [index, group] : state_->engines) result.emplace_back(index, &group);
  return result;
}

std::vector<Group*> Runtime::groups() {
  std::vector<Group*> result;
  if (!state_->world) return result;
  result.push_back(&*state_->world);
  for (auto& mesh : state_->meshes) {
    if (!mesh.holds_this_rank() || !mesh.has_groups()) continue;
    result.push_back(&mesh.role_group());
    for (MeshAxis axis : kMeshAxes) result.push_back(&mesh.group(axis));
  }
  for (auto& [index, group] : state_->engines) result.push_back(&group);
  return result;
}

void Runtime::shutdown(std::string_view reason) {
  state_->shutdown(reason);
  Runtime* self = this;
  dist_detail::current_runtime.compare_exchange_strong(self, nullptr);
}

}  // namespace meshrun
