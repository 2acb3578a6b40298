// TrainingCheckpointer (meshrun/train/training_checkpoint.hpp).
#include "meshrun/train/training_checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "meshrun/bounded_json.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/safetensors.hpp"

namespace meshrun::train_detail {
namespace {

namespace fs = std::filesystem;

std::string recipe_hash(const RunPlan& run) {
  try {
    return file_checksum(run.recipe_file);
  } catch (const CheckpointError&) {
    return "";
  }
}

// The default generator of `device`: the CPU's, or that CUDA device's.
at::Generator generator_of(const torch::Device& device) {
  if (device.is_cuda()) return at::globalContext().defaultGenerator(device);
  return at::detail::getDefaultCPUGenerator();
}

void set_generator_state(const torch::Device& device, const torch::Tensor& state, const std::string& name) {
  at::Generator generator = generator_of(device);  // a handle on the default one
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(state);
  } catch (const c10::Error& error) {  // a state of the wrong size or dtype: LibTorch's message, without its backtrace
    throw CheckpointError("the checkpoint's '" + name + "' is not a random generator state (" +
                          error.what_without_backtrace() + ")");
  }
}

// The files rank `rank` of `world` checks before a checkpoint is used: its
// own rank file under the same layout; a share of the saved rank files
// when resharding (every rank reads all of them); rank 0 also the trainer
// state.
std::vector<std::string> files_to_verify(const CheckpointManifest& manifest, bool same_layout, int rank, int world) {
  std::vector<std::string> names;
  if (same_layout) {
    names.push_back(rank_file_name(rank));
  } else {
    int index = 0;
    for (const auto& file : manifest.files)
      if (file.name.rfind("rank-", 0) == 0 && index++ % world == rank) names.push_back(file.name);
  }
  if (rank == 0) names.push_back("trainer_state.json");
  return names;
}

}  // namespace

void RankState::add_engine(const std::string& role, TrainEngine& engine, const ModelConfig& config, ModelHead head,
                           Precision dtype) {
  for (auto& [name, tensor] : engine.local_state(/*copy=*/false)) tensors[role + "/" + name] = tensor;
  metadata[shard_map_key(role)] = engine.shard_map().to_json();
  metadata[model_config_key(role)] = model_config_to_json(config, head, torch_dtype_name(torch_dtype_of(dtype)));
  metadata[model_head_key(role)] = head == ModelHead::value ? "value" : "language_model";
}

void RankState::add_rng_states(const torch::Device& device) {
  tensors["rng/cpu"] = generator_of(torch::kCPU).get_state();
  if (device.is_cuda()) tensors["rng/cuda"] = generator_of(device).get_state();
}

void ResumePoint::restore_engine(const std::string& role, TrainEngine& engine) const {
  if (reshard_from)
    engine.load_full_state(*reshard_from->state_source(role));
  else
    engine.load_local_state(with_prefix_removed(tensors, role));
}

void ResumePoint::restore_rng_states(const torch::Device& device) const {
  const auto cpu = tensors.find("rng/cpu");
  if (cpu == tensors.end()) throw CheckpointError("the checkpoint holds no 'rng/cpu' state for this rank");
  set_generator_state(torch::kCPU, cpu->second, "rng/cpu");
  // A checkpoint saved on CPU leaves a GPU's generator at its seed.
  if (device.is_cuda() && tensors.count("rng/cuda")) set_generator_state(device, tensors.at("rng/cuda"), "rng/cuda");
}

NamedTensors with_prefix_removed(const NamedTensors& tensors, const std::string& prefix) {
  NamedTensors out;
  const std::string start = prefix + "/";
  for (const auto& [name, tensor] : tensors)
    if (name.rfind(start, 0) == 0) out[name.substr(start.size())] = tensor;
  return out;
}

TrainingCheckpointer::TrainingCheckpointer(const RunPlan& run, Group& world, std::string layout)
    : run_(run), world_(world), layout_(std::move(layout)), dir_(run.checkpoint_path) {}

std::optional<ResumePoint> TrainingCheckpointer::resume() {
  const ResumePolicy policy = run_.resume;
  // Rank 0 cleans up and lists the candidates, newest first.
  nlohmann::json candidates = nlohmann::json::array();
  std::string failure;
  if (world_.rank() == 0) {
    try {
      for (const auto& name : dir_.remove_partials())
        spdlog::warn("checkpoint: removed {} left by an interrupted save", (fs::path(dir_.root()) / name).string());
      if (policy != ResumePolicy::never) {
        const std::vector<int64_t> steps = dir_.complete_steps();
        for (auto step = steps.rbegin(); step != steps.rend(); ++step) candidates.push_back(*step);
      } else if (const std::string aside = dir_.set_aside_complete(fmt::format("replaced-{:%Y%m%dT%H%M%S}Z", fmt::gmtime(std::time(nullptr))));
                 !aside.empty()) {
        spdlog::warn("checkpoint: checkpoint.load = \"never\" starts afresh; the checkpoints already in {} were "
                     "moved into {} (not deleted), so that this run's are not rotated against them",
                     dir_.root(), aside);
      }
    } catch (const std::exception& error) {
      failure = error.what();
    }
  }
  failure = dist::broadcast_object(failure, 0, &world_);
  if (!failure.empty()) throw CheckpointError(failure);
  candidates = nlohmann::json::parse(dist::broadcast_object(candidates.dump(), 0, &world_));

  // Each rank verifies the files it reads (in parallel); a candidate is
  // taken when every rank's files verify.
  int64_t chosen = -1;
  CheckpointManifest manifest;
  for (const auto& candidate : candidates) {
    const int64_t step = candidate.get<int64_t>();
    std::string problem;
    try {
      manifest = dir_.manifest(step);
      if (world_.rank() == 0 && manifest.recipe_hash != recipe_hash(run_))
        spdlog::warn("checkpoint: {} was saved from another version of {}", dir_.final_path(step), run_.recipe_file);
      for (const auto& name : files_to_verify(manifest, manifest.layout == layout_, world_.rank(), world_.size()))
        if (problem.empty()) problem = dir_.verify_file(step, name);
      if (problem.empty()) problem = dir_.unlisted_file(step);
    } catch (const CheckpointError& error) {
      problem = error.what();
    }
    if (!problem.empty())
      spdlog::warn("checkpoint: rank {}: {} fails verification ({}); trying the one before", world_.rank(),
                   dir_.final_path(step), problem);
    if (dist::all_reduce_value(std::int64_t{problem.empty() ? 1 : 0}, ReduceOp::min, &world_) == 1) {
      chosen = step;
      break;
    }
  }
  if (chosen < 0 && policy == ResumePolicy::require)
    throw CheckpointError("checkpoint.load = \"require\" but " + dir_.root() + " holds no complete checkpoint" +
                          (candidates.empty() ? "" : " that verifies"));
  if (chosen < 0) return std::nullopt;

  ResumePoint point;
  point.step = chosen;
  point.saved_layout = manifest.layout;
  const fs::path dir = dir_.final_path(chosen);
  if (manifest.layout == layout_) {
    SafetensorsFile file((dir / rank_file_name(world_.rank())).string());
    for (const auto& entry : file.entries()) point.tensors[entry.name] = file.load(entry.name);
  } else {
    auto reader = std::make_shared<const CheckpointReader>(dir.string());
    const int saved_rank = world_.rank() % reader->world_size();
    for (const char* name : {"rng/cpu", "rng/cuda"})
      if (reader->has_tensor(saved_rank, name)) point.tensors[name] = reader->tensor(saved_rank, name);
    point.reshard_from = std::move(reader);
  }
  // The trainer's state is a small JSON object; 64 MiB bounds a damaged file.
  const BoundedText trainer = read_bounded((dir / "trainer_state.json").string(), std::size_t{64} << 20);
  point.trainer_file = (dir / "trainer_state.json").string();
  point.trainer = parse_bounded_json(trainer.text, /*allow_exceptions=*/false);
  if (point.trainer.is_discarded() || !point.trainer.is_object())
    throw CheckpointError(point.trainer_file + " is not a JSON object");
  if (world_.rank() == 0) {
    if (point.reshard_from)
      spdlog::info("checkpoint: resuming from {} (step {}), resharding \"{}\" to \"{}\"", dir.string(), chosen,
                   manifest.layout, layout_);
    else
      spdlog::info("checkpoint: resuming from {} (step {})", dir.string(), chosen);
  }
  return point;
}

TrainingCheckpointer::~TrainingCheckpointer() {
  if (pending_ && pending_->written.valid()) pending_->written.wait();
}

std::optional<int64_t> TrainingCheckpointer::pending_step() const {
  return pending_ ? std::optional<int64_t>(pending_->step) : std::nullopt;
}

void TrainingCheckpointer::save(int64_t step, const RankState& state, const nlohmann::json& trainer,
                                const std::function<void(const std::string&)>& write_extra) {
  finish();
  std::string partial = world_.rank() == 0 ? dir_.begin(step) : "";
  partial = dist::broadcast_object(partial, 0, &world_);
  if (run_.async_checkpoints) {
    pending_.emplace();
    pending_->step = step;
    pending_->written = std::async(std::launch::async, [this, partial, staged = stage(state), trainer, write_extra] {
      write_files(partial, staged, trainer, write_extra);
    });
    return;
  }
  write_files(partial, state, trainer, write_extra);
  world_.barrier();
  if (world_.rank() == 0) commit(step);
  world_.barrier();
}

RankState TrainingCheckpointer::stage(const RankState& state) {
  RankState staged;
  staged.metadata = state.metadata;
  for (const auto& [name, tensor] : state.tensors) {
    torch::Tensor& buffer = staging_[name];
    if (!buffer.defined() || !buffer.sizes().equals(tensor.sizes()) || buffer.scalar_type() != tensor.scalar_type())
      buffer = torch::empty(tensor.sizes(), tensor.options().device(torch::kCPU).pinned_memory(tensor.is_cuda()));
    buffer.copy_(tensor);
    staged.tensors[name] = buffer;
  }
  return staged;
}

void TrainingCheckpointer::write_files(const std::string& partial, const RankState& state,
                                       const nlohmann::json& trainer,
                                       const std::function<void(const std::string&)>& write_extra) const {
  TensorList list(state.tensors.begin(), state.tensors.end());
  write_safetensors((fs::path(partial) / rank_file_name(world_.rank())).string(), list, state.metadata);
  if (world_.rank() == 0) write_file_atomically((fs::path(partial) / "trainer_state.json").string(), trainer.dump(2) + "\n");
  if (write_extra) write_extra(partial);
}

void TrainingCheckpointer::settle(bool wait) {
  if (!pending_) return;
  Pending& pending = *pending_;
  if (pending.status == 0 &&
      (wait || pending.written.wait_for(std::chrono::seconds(0)) == std::future_status::ready)) {
    try {
      pending.written.get();
      pending.status = 1;
    } catch (const std::exception& error) {
      pending.status = -1;
      pending.error = error.what();
    }
  }
  const int64_t verdict = dist::all_reduce_value(std::int64_t{pending.status}, ReduceOp::min, &world_);
  if (verdict == 0) return;  // a rank is still writing
  const int64_t step = pending.step;
  const std::string error = pending.error;
  pending_.reset();
  if (verdict < 0)
    throw CheckpointError("checkpoint of step " + std::to_string(step) + " could not be written: " +
                          (error.empty() ? "another rank failed (see its log)" : error));
  if (world_.rank() == 0) commit(step);
  if (wait) world_.barrier();
}

void TrainingCheckpointer::commit(int64_t step) const {
  CheckpointManifest info;
  info.algorithm = run_.algorithm;
  info.recipe_hash = recipe_hash(run_);
  info.layout = layout_;
  const CheckpointManifest manifest = dir_.commit(step, info);
  for (int64_t old : dir_.rotate(run_.keep_last, run_.max_checkpoint_bytes))
    spdlog::info("checkpoint: removed {} (keep_last {}, max_size_gb {:g})", dir_.final_path(old), run_.keep_last,
                 static_cast<double>(run_.max_checkpoint_bytes) / static_cast<double>(1LL << 30));
  spdlog::info("checkpoint: step {} saved to {} ({:.1f} MB{})", step, dir_.final_path(step),
               static_cast<double>(manifest.total_bytes()) / 1e6,
               run_.async_checkpoints ? ", written in the background" : "");
}

const nlohmann::json& ResumePoint::trainer_field(const std::string& key) const {
  const auto found = trainer.find(key);
  if (found == trainer.end()) throw CheckpointError(trainer_file + ": \"" + key + "\" is missing");
  return *found;
}

double ResumePoint::trainer_number(const std::string& key, double least) const {
  const nlohmann::json& value = trainer_field(key);
  if (!value.is_number() || !std::isfinite(value.get<double>()) || value.get<double>() < least)
    throw CheckpointError(trainer_file + ": \"" + key + "\" is " + value.dump().substr(0, 60) +
                          ", not a finite number" + (std::isfinite(least) ? " ≥ " + fmt::format("{:g}", least) : ""));
  return value.get<double>();
}

int64_t ResumePoint::trainer_integer(const std::string& key, int64_t least) const {
  const nlohmann::json& value = trainer_field(key);
  if (!value.is_number_integer() || (value.is_number_unsigned() && value.get<uint64_t>() > INT64_MAX) ||
      value.get<int64_t>() < least)
    throw CheckpointError(trainer_file + ": \"" + key + "\" is " + value.dump().substr(0, 60) +
                          ", not a whole number ≥ " + std::to_string(least));
  return value.get<int64_t>();
}

}  // namespace meshrun::train_detail
