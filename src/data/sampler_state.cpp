// SamplerState to and from JSON (saved with checkpoints).
#include <nlohmann/json.hpp>

#include "meshrun/bounded_json.hpp"
#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/data/sampler.hpp"

namespace meshrun {

namespace {

int64_t integer_at(const nlohmann::json& object, const char* key) {
  const auto found = object.find(key);
  if (found == object.end()) throw CheckpointError(std::string("sampler state: missing key \"") + key + "\"");
  if (!found->is_number_integer()) {
    throw CheckpointError(std::string("sampler state: key \"") + key + "\" must be an integer, got " +
                          found->dump());
  }
  return found->get<int64_t>();
}

}  // namespace

std::string SamplerState::to_json() const {
  nlohmann::ordered_json object;
  object["epoch"] = epoch;
  object["position"] = position;
  if (num_items >= 0) object["num_items"] = num_items;
  if (global_batch >= 0) object["global_batch"] = global_batch;
  if (seed) object["seed"] = *seed;
  return object.dump();
}

SamplerState SamplerState::from_json(std::string_view text) {
  nlohmann::json object;
  try {
    object = parse_bounded_json(text);
  } catch (const nlohmann::json::exception& error) {
    throw CheckpointError(std::string("sampler state is not JSON: ") + error.what());
  }
  if (!object.is_object()) throw CheckpointError("sampler state must be a JSON object");
  SamplerState state;
  state.epoch = integer_at(object, "epoch");
  state.position = integer_at(object, "position");
  if (object.contains("num_items")) state.num_items = integer_at(object, "num_items");
  if (object.contains("global_batch")) state.global_batch = integer_at(object, "global_batch");
  if (object.contains("seed")) state.seed = integer_at(object, "seed");
  if (state.epoch < 0 || state.position < 0) {
    throw CheckpointError("sampler state: epoch and position must not be negative");
  }
  return state;
}

}  // namespace meshrun
