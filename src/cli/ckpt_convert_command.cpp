// `meshrun ckpt convert CHECKPOINT OUT [--role R] [--dtype D]`: one role's
// model out of a training checkpoint of any layout, as a Hugging Face
// directory (config.json + safetensors) that `meshrun generate`, a recipe's
// `model` key and transformers load. The checkpoint is verified first; its
// shards are reassembled exactly (meshrun/train/checkpoint_state.hpp), from the
// fp32 master weights, then stored in the role's training dtype unless
// --dtype says otherwise. The folder is completed as the run's own output
// is (tokenizer files, generation_config.json), from the base model and
// tokenizer the checkpoint's recipe named.
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "commands.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/data/data.hpp"
#include "meshrun/train/checkpoint_state.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/model/lora_adapter.hpp"
#include "meshrun/bounded_json.hpp"
#include "meshrun/train/trainer_output.hpp"

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

// One string key of the recipe a run recorded in its checkpoints
// (trainer_state.json's recipe.keys: each value as TOML writes it); empty
// when absent or not a string.
std::string recorded_string(const nlohmann::json& keys, const std::string& key) {
  const auto found = keys.find(key);
  if (found == keys.end() || !found->is_string()) return {};
  try {
    const toml::table parsed = toml::parse("v = " + found->get<std::string>());
    return parsed["v"].value<std::string>().value_or("");
  } catch (const toml::parse_error&) {
    return {};
  }
}

// What the run's own output folder is completed from (complete_model_folder):
// the role's base model and the tokenizer its data was read with
// (data_tokenizer_source of data.tokenizer and the actor's model). Empty
// when the checkpoint recorded no recipe (written by hand, or by an older
// meshrun).
struct RecordedSources {
  std::string base_model;
  std::string tokenizer;
};

RecordedSources recorded_sources(const std::string& directory, const std::string& role) {
  // The trainer's state is a small JSON object; 64 MiB bounds a damaged
  // file, as a resume does (training_checkpoint.cpp).
  const std::filesystem::path path = std::filesystem::path(directory) / "trainer_state.json";
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) return {};
  const BoundedText text = read_bounded(path.string(), std::size_t{64} << 20);
  const nlohmann::json trainer = parse_bounded_json(text.text, /*allow_exceptions=*/false);
  if (!trainer.is_object()) return {};
  const auto recipe = trainer.find("recipe");
  if (recipe == trainer.end() || !recipe->is_object()) return {};
  const auto keys = recipe->find("keys");
  if (keys == recipe->end() || !keys->is_object()) return {};
  RecordedSources out;
  out.base_model = recorded_string(*keys, "roles." + role + ".model");
  out.tokenizer =
      data_tokenizer_source(recorded_string(*keys, "data.tokenizer"), recorded_string(*keys, "roles.actor.model"));
  return out;
}

}  // namespace

int ckpt_convert_command(const CkptConvertOptions& options) {
  const std::string directory = checkpoint_to_convert(options.checkpoint);
  // Written into a sealed checkpoint, the model's files would fail its
  // manifest: the checkpoint would no longer verify, and a resume skip it.
  // The folder of checkpoints it sits in is theirs too (lint refuses a
  // checkpoint.output there alike).
  for (const fs::path& source :
       {fs::path(directory).parent_path(), fs::path(directory), fs::path(options.checkpoint)})
    if (path_is_within(options.output, source.string())) {
      std::fprintf(stderr,
                   "meshrun ckpt convert: the output %s is the checkpoint folder %s or inside it; name a folder "
                   "outside the checkpoints (its files would not be in the checkpoint's manifest)\n",
                   options.output.c_str(), source.string().c_str());
      return kFailed;
    }
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
  const RecordedSources sources = recorded_sources(directory, options.role);
  if (sources.base_model.empty())
    std::fprintf(stderr,
                 "meshrun ckpt convert: %s records no recipe; %s has no tokenizer files and a generation_config.json "
                 "derived from its config.json\n",
                 directory.c_str(), options.output.c_str());
  train_detail::complete_model_folder(sources.base_model, sources.tokenizer, config, options.output);
  int64_t count = 0;
  for (const auto& [name, tensor] : parameters) count += tensor.numel();
  std::fputs(fmt::format("{} of {} ({} parameters, {}) written to {}\n", options.role, directory, count,
                         torch_dtype_name(save_options.dtype.value_or(torch::kFloat32)), options.output)
                 .c_str(),
             stdout);
  return kOk;
}

}  // namespace meshrun::cli
