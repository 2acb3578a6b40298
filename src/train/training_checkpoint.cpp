// TrainingCheckpointer (src/train/training_checkpoint.hpp).
#include "training_checkpoint.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <mutex>
#include <fstream>
#include <sstream>
#include <spdlog/spdlog.h>

#include "meshrun/safetensors.hpp"

namespace meshrun::train_detail {
namespace {

namespace fs = std::filesystem;

std::string rank_file(int rank) { return "rank-" + std::to_string(rank) + ".safetensors"; }

std::string recipe_hash(const Recipe& recipe) {
  try {
    return file_checksum(recipe.file);
  } catch (const CheckpointError&) {
    return "";
  }
}

}  // namespace

torch::Tensor cpu_rng_state() { return at::detail::getDefaultCPUGenerator().get_state(); }

void set_cpu_rng_state(const torch::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();  // a handle on the default one
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

NamedTensors with_prefix_removed(const NamedTensors& tensors, const std::string& prefix) {
  NamedTensors out;
  const std::string start = prefix + "/";
  for (const auto& [name, tensor] : tensors)
    if (name.rfind(start, 0) == 0) out[name.substr(start.size())] = tensor;
  return out;
}

TrainingCheckpointer::TrainingCheckpointer(const Recipe& recipe, Group& world, std::string layout)
    : recipe_(recipe), world_(world), layout_(std::move(layout)), dir_(recipe.checkpoint.path) {}

bool TrainingCheckpointer::due(int64_t step, bool last) const {
  return last || (recipe_.checkpoint.save_steps > 0 && step % recipe_.checkpoint.save_steps == 0);
}

std::optional<ResumePoint> TrainingCheckpointer::resume() {
  const std::string& policy = recipe_.checkpoint.load;
  // Rank 0 cleans up and lists the candidates, newest first.
  nlohmann::json candidates = nlohmann::json::array();
  std::string failure;
  if (world_.rank() == 0) {
    try {
      for (const auto& name : dir_.remove_partials())
        spdlog::warn("checkpoint: removed {} left by an interrupted save", (fs::path(dir_.root()) / name).string());
      if (policy != "auto" && policy != "require" && policy != "never")
        throw CheckpointError("unknown checkpoint.load policy \"" + policy + "\": auto, require or never");
      if (policy != "never") {
        const std::vector<int64_t> steps = dir_.complete_steps();
        for (auto step = steps.rbegin(); step != steps.rend(); ++step) candidates.push_back(*step);
      }
    } catch (const std::exception& error) {
      failure = error.what();
    }
  }
  failure = dist::broadcast_object(failure, 0, &world_);
  if (!failure.empty()) throw CheckpointError(failure);
  candidates = nlohmann::json::parse(dist::broadcast_object(candidates.dump(), 0, &world_));

  // Each rank verifies the files it reads (in parallel, one pass over its
  // own file); a candidate is taken when every rank's files verify.
  int64_t chosen = -1;
  for (const auto& candidate : candidates) {
    const int64_t step = candidate.get<int64_t>();
    if (world_.rank() == 0) {
      try {
        const CheckpointManifest manifest = dir_.manifest(step);
        if (manifest.layout != layout_)
          throw CheckpointError("checkpoint " + dir_.final_path(step) + " was saved with layout \"" + manifest.layout +
                                "\" but this run is \"" + layout_ +
                                "\"; resume with the same layout (resharding is not supported yet)");
        if (manifest.recipe_hash != recipe_hash(recipe_))
          spdlog::warn("checkpoint: {} was saved from another version of {}", dir_.final_path(step), recipe_.file);
      } catch (const std::exception& error) {
        failure = error.what();
      }
    }
    failure = dist::broadcast_object(failure, 0, &world_);
    if (!failure.empty()) throw CheckpointError(failure);
    std::string problem = dir_.verify_file(step, rank_file(world_.rank()));
    if (problem.empty() && world_.rank() == 0) problem = dir_.verify_file(step, "trainer_state.json");
    if (!problem.empty())
      spdlog::warn("checkpoint: rank {}: {} fails verification ({}); trying the one before", world_.rank(),
                   dir_.final_path(step), problem);
    if (dist::all_reduce_value(std::int64_t{problem.empty() ? 1 : 0}, ReduceOp::min, &world_) == 1) {
      chosen = step;
      break;
    }
  }
  if (chosen < 0 && policy == "require")
    throw CheckpointError("checkpoint.load = \"require\" but " + dir_.root() + " holds no complete checkpoint" +
                          (candidates.empty() ? "" : " that verifies"));
  if (chosen < 0) return std::nullopt;

  ResumePoint point;
  point.step = chosen;
  const fs::path dir = dir_.final_path(chosen);
  SafetensorsFile file((dir / rank_file(world_.rank())).string());
  for (const auto& entry : file.entries()) point.tensors[entry.name] = file.load(entry.name);
  std::ifstream trainer(dir / "trainer_state.json");
  std::stringstream text;
  text << trainer.rdbuf();
  point.trainer = nlohmann::json::parse(text.str(), nullptr, false);
  if (point.trainer.is_discarded()) throw CheckpointError((dir / "trainer_state.json").string() + " is not JSON");
  if (world_.rank() == 0) spdlog::info("checkpoint: resuming from {} (step {})", dir.string(), chosen);
  return point;
}

void TrainingCheckpointer::save(int64_t step, const NamedTensors& tensors, const nlohmann::json& trainer,
                                const std::function<void(const std::string&)>& write_extra) {
  std::string partial = world_.rank() == 0 ? dir_.begin(step) : "";
  partial = dist::broadcast_object(partial, 0, &world_);
  TensorList list(tensors.begin(), tensors.end());
  write_safetensors((fs::path(partial) / rank_file(world_.rank())).string(), list);
  if (world_.rank() == 0) std::ofstream(fs::path(partial) / "trainer_state.json") << trainer.dump(2) << "\n";
  if (write_extra) write_extra(partial);
  world_.barrier();
  if (world_.rank() == 0) {
    CheckpointManifest info;
    info.algorithm = recipe_.algorithm;
    info.recipe_hash = recipe_hash(recipe_);
    info.layout = layout_;
    const CheckpointManifest manifest = dir_.commit(step, info);
    const auto max_bytes = static_cast<int64_t>(recipe_.checkpoint.max_size_gb * (1LL << 30));
    for (int64_t old : dir_.rotate(recipe_.checkpoint.keep_last, max_bytes))
      spdlog::info("checkpoint: removed {} (keep_last {}, max_size_gb {})", dir_.final_path(old),
                   recipe_.checkpoint.keep_last, recipe_.checkpoint.max_size_gb);
    spdlog::info("checkpoint: step {} saved to {} ({:.1f} MB)", step, dir_.final_path(step),
                 static_cast<double>(manifest.total_bytes()) / 1e6);
  }
  world_.barrier();
}

}  // namespace meshrun::train_detail
