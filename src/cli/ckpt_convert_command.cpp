// `meshrun ckpt convert CHECKPOINT OUT [--role R] [--dtype D]`: one role's
// model out of a training checkpoint of any layout, as a Hugging Face
// directory (config.json + safetensors) that `meshrun generate`, a recipe's
// `model` key and transformers load. The checkpoint is verified first; its
// shards are reassembled exactly (meshrun/train/checkpoint_state.hpp), from the
// fp32 master weights, then stored in the role's training dtype unless
// --dtype says otherwise.
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>

#include "commands.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/train/checkpoint_state.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/lora_adapter.hpp"

namespace meshrun::cli {
namespace {

namespace fs = std::filesystem;

// The checkpoint directory to read: the one given, or the newest one under
// a [checkpoint] path that verifies. Throws CheckpointError.
std::string checkpoint_to_convert(const std::string& path) {
  fs::path target = fs::absolute(path).lexically_normal();
  if (!target.has_filename()) target = target.parent_path();
  if (auto single = as_checkpoint(target)) {
    const CheckpointDir dir(single->first);
    const std::string problem = dir.verify(single->second);
    if (!problem.empty()) throw CheckpointError(target.string() + " fails verification: " + problem);
    return target.string();
  }
  if (!fs::is_directory(target))
    throw CheckpointError(path + " is neither a checkpoint nor a folder of checkpoints");
  const CheckpointDir dir(target.string());
  std::vector<std::string> warnings;
  const std::optional<int64_t> step = dir.choose("require", warnings);
  for (const auto& warning : warnings) std::fprintf(stderr, "meshrun ckpt convert: %s\n", warning.c_str());
  return dir.final_path(*step);
}

}  // namespace

int ckpt_convert_command(const CkptConvertOptions& options) {
  const std::string directory = checkpoint_to_convert(options.checkpoint);
  const CheckpointReader reader(directory);
  const std::vector<std::string> roles = reader.roles();
  if (std::find(roles.begin(), roles.end(), options.role) == roles.end()) {
    std::string known;
    for (const auto& role : roles) known += (known.empty() ? "" : ", ") + role;
    std::fprintf(stderr, "meshrun ckpt convert: %s holds no role '%s' (it holds: %s)\n", directory.c_str(),
                 options.role.c_str(), known.empty() ? "none with a shard map" : known.c_str());
    return kFailed;
  }
  const ModelConfig config = reader.model_config(options.role);
  SaveModelOptions save_options;
  if (!options.dtype.empty())
    save_options.dtype = dtype_from_recipe_name(options.dtype);
  else if (!config.torch_dtype.empty())
    save_options.dtype = dtype_from_name(config.torch_dtype);
  const NamedTensors parameters = reader.full_state(options.role, /*with_moments=*/false).parameters;
  if (!parameters.empty() && adapter_tensors(parameters).size() == parameters.size()) {
    // The rank files of a LoRA run hold the adapters alone (the base is
    // frozen and rebuilt from roles.actor.model); their scale is the recipe's.
    std::fprintf(stderr,
                 "meshrun ckpt convert: %s holds the LoRA adapters of %s only, not a whole model; the merged model "
                 "and the adapter in PEFT format are the run's checkpoint.output (and each checkpoint's hf/%s with "
                 "checkpoint.save_hf = true)\n",
                 directory.c_str(), options.role.c_str(), options.role.c_str());
    return kFailed;
  }
  save_hf_model(options.output, config, reader.model_head(options.role), parameters, save_options);
  int64_t count = 0;
  for (const auto& [name, tensor] : parameters) count += tensor.numel();
  std::fputs(fmt::format("{} of {} ({} parameters, {}) written to {}\n", options.role, directory, count,
                         torch_dtype_name(save_options.dtype.value_or(torch::kFloat32)), options.output)
                 .c_str(),
             stdout);
  return kOk;
}

}  // namespace meshrun::cli
