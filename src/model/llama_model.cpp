// LlamaModel: the modules under Hugging Face's names ("model.embed_tokens",
// "model.layers.N", "model.norm", "lm_head" or "score"), the forward over
// units with hooks, and the per-forward attention inputs (rope tables and
// mask built once and shared by every layer, cached by length).
#include "cpu_attention.hpp"
#include "cpu_decode_step.hpp"
#include "layers.hpp"

namespace meshrun {

using namespace model_detail;

struct LlamaModelImpl::Layers {
  TensorParallel tp;
  ExpertParallel ep;
  SequenceParallel sp;
  VocabParallelEmbedding embed{nullptr};
  std::vector<DecoderLayer> layers;
  RmsNorm norm{nullptr};
  Linear head{nullptr};  // lm_head or score; null when tied
  // Inputs of forwards with default positions and no packing or padding.
  int64_t cached_length = -1;
  AttentionInputs cached;
  RouterRecord router;  // the latest training forward's (mixtures of experts)
  std::vector<torch::Tensor>* route_capture = nullptr;
  // The rotary inverse frequencies on the device (the model's, then its
  // windowed layers' when they have their own base), made once for every
  // forward whose scaling does not depend on the length
  // (cache_inverse_frequencies).
  torch::Tensor decode_inverse, decode_window_inverse;
};

namespace {

void check_divisible(int64_t value, const char* key, int tp) {
  if (value % tp != 0)
    throw ModelConfigError(std::string(key) + " " + std::to_string(value) +
                           " is not divisible by the tensor-parallel size " + std::to_string(tp));
}

void check_supported(const ModelOptions& options, int tp) {
  const ModelConfig& c = options.config;
  c.validate("model config");
  check_divisible(c.heads, "num_attention_heads", tp);
  check_divisible(c.kv_heads, "num_key_value_heads", tp);
  check_divisible(c.intermediate, "intermediate_size", tp);
  if (c.mixture_of_experts())
    check_divisible(c.expert_intermediate, std::string(model_family_row(c.family).expert_intermediate_key).c_str(), tp);
  check_divisible(c.vocab, "vocab_size", tp);
  // Adapters are named and saved for unfused projections (lint's lora.unsupported).
  if (options.lora.enabled() && model_family_row(c.family).fused_projections)
    throw ModelConfigError("LoRA adapters are not supported on " + std::string(c.model_type()) +
                           " models: their files fuse q/k/v into qkv_proj and gate/up into gate_up_proj");
}

// The projections split along out (the rest of a layer's: along in).
constexpr const char* kColumnParallel[] = {"q_proj.", "k_proj.", "v_proj.", "gate_proj.", "up_proj.", ".w1.", ".w3."};

bool column_parallel(const std::string& name) {
  for (const char* column : kColumnParallel)
    if (name.find(column) != std::string::npos) return true;
  return false;
}

// Split dim, unit and decay of a parameter, from its name.
// Where ".experts.<index>." sits in an expert parameter's name: the
// index's first character and its length; {npos, 0} otherwise.
std::pair<size_t, size_t> expert_index_in(const std::string& name) {
  static constexpr std::string_view kExperts = ".experts.";
  const size_t found = name.find(kExperts);
  if (found == std::string::npos) return {std::string::npos, 0};
  const size_t first = found + kExperts.size();
  const size_t end = name.find('.', first);
  if (end == std::string::npos || end == first) return {std::string::npos, 0};
  return {first, end - first};
}

ParameterSpec spec_for(const std::string& name, const torch::Tensor& local, int layers, int tp, bool tied,
                       bool adapters_on, int experts) {
  ParameterSpec spec;
  spec.name = name;
  if (const auto [first, length] = expert_index_in(name); first != std::string::npos) {
    spec.expert = std::stoi(name.substr(first, length));
    spec.experts = experts;
  }
  const auto ends_with = [&](std::string_view suffix) { return name.ends_with(suffix); };
  const bool lora_a = name.find(".lora_A.") != std::string::npos;
  const bool lora_b = name.find(".lora_B.") != std::string::npos;
  spec.adapter = lora_a || lora_b;
  spec.trainable = spec.adapter || !adapters_on;
  if (spec.adapter) {
    // Split like the weight they adapt (meshrun/arch/lora.hpp).
    spec.unit = std::stoi(name.substr(13)) + 1;
    const bool column = column_parallel(name);
    spec.split_dim = lora_a ? (column ? -1 : 1) : (column ? 0 : -1);
    spec.full_shape = local.sizes().vec();
    if (spec.split_dim >= 0) spec.full_shape[spec.split_dim] *= tp;
    return spec;
  }
  spec.decays = !ends_with(".bias") && name.find("norm") == std::string::npos;
  if (name == "model.embed_tokens.weight") {
    spec.unit = 0;
    spec.split_dim = 0;
    if (tied) spec.also_used_by_unit = layers + 1;
  } else if (name.rfind("model.layers.", 0) == 0) {
    spec.unit = std::stoi(name.substr(13)) + 1;
    if (column_parallel(name)) spec.split_dim = 0;
    if ((name.find("o_proj.") != std::string::npos || name.find("down_proj.") != std::string::npos ||
         name.find(".w2.") != std::string::npos) &&
        ends_with(".weight"))
      spec.split_dim = 1;
  } else {
    spec.unit = layers + 1;
    if (name == "lm_head.weight") spec.split_dim = 0;
  }
  spec.full_shape = local.sizes().vec();
  if (spec.split_dim >= 0) spec.full_shape[spec.split_dim] *= tp;
  return spec;
}

torch::Tensor initial_value(const ParameterSpec& spec, double std, bool norms_plus_one) {
  if (spec.adapter) {
    // PEFT's init: A as nn.Linear's default (kaiming-uniform with a = √5,
    // i.e. uniform ±1/√in), B zero.
    if (spec.name.find(".lora_B.") != std::string::npos) return torch::zeros(spec.full_shape);
    const double bound = 1.0 / std::sqrt(static_cast<double>(spec.full_shape[1]));
    return torch::rand(spec.full_shape) * (2 * bound) - bound;
  }
  const bool norm = spec.name.find("norm") != std::string::npos;
  if (norm) return norms_plus_one ? torch::zeros(spec.full_shape) : torch::ones(spec.full_shape);
  if (spec.name.ends_with(".bias")) return torch::zeros(spec.full_shape);
  return torch::randn(spec.full_shape) * std;
}

// The attention masks of one forward from `build` (a mask of a config): a
// model whose layers differ in their window gets the full-attention layers'
// in mask and the windowed layers' in window_mask.
template <class Build>
void set_masks(const ModelConfig& c, AttentionInputs& shared, Build build) {
  if (!c.mixed_windows()) {
    shared.mask = build(c);
    return;
  }
  ModelConfig full = c;
  full.sliding_window = 0;
  shared.mask = build(full);
  shared.window_mask = build(c);
}

// The rotary tables of one forward from `build` (tables of a config): a
// model whose windowed layers have their own base gets theirs in
// window_rope.
ModelConfig window_rope_config(const ModelConfig& c) {
  ModelConfig local = c;
  local.rope_theta = c.window_rope_theta;
  local.rope_scaling = c.window_rope_scaling;
  return local;
}

template <class Build>
void set_ropes(const ModelConfig& c, AttentionInputs& shared, Build build) {
  shared.rope = build(c);
  if (c.window_rope_theta > 0) shared.window_rope = build(window_rope_config(c));
}

// The model's rotary inverse frequencies (and its windowed layers') on
// `device`, made once (the same values rotary_tables computes on the host
// and copies over, a wait on a GPU at every forward).
struct DeviceFrequencies {
  torch::Tensor& inverse;
  torch::Tensor& window_inverse;
};

void cache_inverse_frequencies(const ModelConfig& c, DeviceFrequencies m, const torch::Device& device) {
  if (m.inverse.defined() && m.inverse.device() == device) return;
  m.inverse = rope_inverse_frequencies(c, 0).to(device);
  if (c.window_rope_theta > 0) m.window_inverse = rope_inverse_frequencies(window_rope_config(c), 0).to(device);
}

// set_ropes for positions on their device: from the cached frequencies
// unless a scaling depends on the forward's length (dynamic, longrope).
void set_ropes_at(const ModelConfig& c, DeviceFrequencies m, AttentionInputs& shared, const torch::Tensor& positions,
                  torch::Dtype dtype) {
  if (rope_depends_on_length(c) || (c.window_rope_theta > 0 && rope_depends_on_length(window_rope_config(c)))) {
    set_ropes(c, shared, [&](const ModelConfig& config) { return rotary_tables(config, positions, dtype); });
    return;
  }
  cache_inverse_frequencies(c, m, positions.device());
  shared.rope = rotary_tables_from(c, positions, m.inverse, dtype);
  if (c.window_rope_theta > 0)
    shared.window_rope = rotary_tables_from(window_rope_config(c), positions, m.window_inverse, dtype);
}

// The pool slots of positions [batch, n] (or [1, n], the same for every
// row) through block tables [batch, width]: position p of row b lives in
// slot tables[b][p / block] × block + p % block. Row-major [batch × n].
torch::Tensor pool_slots(const torch::Tensor& tables, const torch::Tensor& positions, int64_t block) {
  const torch::Tensor rows = positions.expand({tables.size(0), positions.size(1)});
  return (tables.gather(1, rows.div(block, "floor")) * block + rows.remainder(block)).reshape(-1);
}

// Gemma 2's final_logit_softcapping: cap × tanh(logits / cap); 0: none.
torch::Tensor soft_cap(const torch::Tensor& logits, double cap) {
  return cap > 0 ? (logits / cap).tanh() * cap : logits;
}

// `read_ids`: whether to read the ids' range back (a device sync on a GPU,
// which the engine's decode steps skip: it checks the ids on the host).
void check_inputs(const ModelInputs& in, int64_t vocab, bool read_ids = true) {
  const torch::Tensor& ids = in.input_ids;
  if (!ids.defined() || ids.dim() != 2 || ids.scalar_type() != torch::kInt64)
    throw std::logic_error("input_ids must be an int64 tensor [batch, seq]");
  for (const auto* other : {&in.position_ids, &in.sequence_ids, &in.attention_mask})
    if (other->defined() && other->sizes() != ids.sizes())
      throw std::logic_error("position_ids, sequence_ids and attention_mask must have the shape of input_ids " +
                             c10::str(ids.sizes()) + ", got " + c10::str(other->sizes()));
  if (read_ids && !in.ids_checked && ids.numel() > 0) {
    const int64_t low = ids.min().item<int64_t>(), high = ids.max().item<int64_t>();
    if (low < 0 || high >= vocab)
      throw ModelInputError("input id " + std::to_string(low < 0 ? low : high) +
                            " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
  }
}

}  // namespace

std::string expert_parameter_name(const ParameterSpec& spec, int expert) {
  const auto [first, length] = expert_index_in(spec.name);
  if (first == std::string::npos) throw std::logic_error("expert_parameter_name: " + spec.name + " is no expert's");
  return spec.name.substr(0, first) + std::to_string(expert) + spec.name.substr(first + length);
}

LlamaModelImpl::LlamaModelImpl(ModelOptions options) : options_(std::move(options)), layers_(std::make_shared<Layers>()) {
  Layers& m = *layers_;
  if (options_.tensor_parallel) {
    m.tp.group = options_.tensor_parallel;
    m.tp.rank = options_.tensor_parallel->rank();
    m.tp.size = options_.tensor_parallel->size();
  }
  if (options_.sequence_parallel) {
    m.sp.group = options_.sequence_parallel;
    m.sp.rank = options_.sequence_parallel->rank();
    m.sp.size = options_.sequence_parallel->size();
  }
  if (options_.expert_parallel) {
    m.ep.group = options_.expert_parallel;
    m.ep.rank = options_.expert_parallel->rank();
    m.ep.size = options_.expert_parallel->size();
  }
  check_supported(options_, m.tp.size);
  const ModelConfig& c = options_.config;
  const auto tensor_options = torch::TensorOptions().dtype(options_.dtype).device(options_.device);

  auto body = register_module("model", std::make_shared<torch::nn::Module>());
  m.embed = body->register_module("embed_tokens", VocabParallelEmbedding(c.vocab, c.hidden, m.tp, tensor_options,
                                                                 c.scaled_embedding ? std::sqrt(static_cast<double>(c.hidden)) : 0.0));
  auto layer_list = body->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.layers; ++i) {
    m.layers.push_back(DecoderLayer(c, m.tp, m.ep, tensor_options, i));
    layer_list->push_back(m.layers.back());
  }
  m.norm = body->register_module("norm", RmsNorm(c.hidden, c.rms_norm_eps, tensor_options, c.norm_plus_one));
  if (options_.head == ModelHead::value)
    m.head = register_module("score", Linear(c.hidden, 1, false, tensor_options));
  else if (!c.tied_embeddings)
    m.head = register_module("lm_head", Linear(c.hidden, c.vocab / m.tp.size, false, tensor_options));

  const LoraSettings& lora = options_.lora;
  if (lora.enabled()) {
    for (DecoderLayer& layer : m.layers) {
      // A sparse layer's experts take no adapters (lint's lora.experts).
      Mlp& mlp = layer->mlp;
      const std::pair<const char*, Linear*> projections[] = {
          {"q_proj", &layer->self_attn->q_proj}, {"k_proj", &layer->self_attn->k_proj},
          {"v_proj", &layer->self_attn->v_proj}, {"o_proj", &layer->self_attn->o_proj},
          {"gate_proj", mlp ? &mlp->gate_proj : nullptr}, {"up_proj", mlp ? &mlp->up_proj : nullptr},
          {"down_proj", mlp ? &mlp->down_proj : nullptr}};
      for (const auto& [name, projection] : projections) {
        if (!projection || !lora.targets_module(name)) continue;
        const bool row = std::string_view(name) == "o_proj" || std::string_view(name) == "down_proj";
        (*projection)->add_lora(lora, row ? LinearSplit::row : LinearSplit::column, m.tp, tensor_options);
      }
    }
  }

  const bool tied = c.tied_embeddings && options_.head == ModelHead::language_model;
  for (const auto& item : named_parameters())
    specs_.push_back(spec_for(item.key(), item.value(), static_cast<int>(c.layers), m.tp.size, tied, lora.enabled(),
                              static_cast<int>(c.experts)));

  torch::NoGradGuard no_grad;
  auto parameters = named_parameters();
  const auto initialise = [&](const ParameterSpec& spec) {
    torch::Tensor full = initial_value(spec, c.initializer_range, c.norm_plus_one);
    torch::Tensor& target = parameters[spec.name];
    if (spec.split_dim >= 0) {
      const int64_t size = target.size(spec.split_dim);
      full = full.narrow(spec.split_dim, size * m.tp.rank, size);
    }
    target.copy_(full);
  };
  // The base weights first, so that a seed gives the same base with or
  // without adapters. Every expert is drawn, held here or not, so that a
  // seed gives the same experts under any ep.
  const auto draw_missing_experts = [&](int64_t from, int64_t to, const std::vector<const ParameterSpec*>& expert_specs) {
    for (int64_t e = from; e < to; ++e)
      for (const ParameterSpec* spec : expert_specs) {
        ParameterSpec other = *spec;
        other.name = expert_parameter_name(*spec, static_cast<int>(e));
        initial_value(other, c.initializer_range, c.norm_plus_one);
      }
  };
  if (options_.initialize)
    for (size_t i = 0; i < specs_.size(); ++i) {
      const ParameterSpec& spec = specs_[i];
      if (spec.adapter) continue;
      if (spec.expert < 0 || m.ep.size == 1) {
        initialise(spec);
        continue;
      }
      // This layer's held experts are a run of specs (a layer's norm or
      // attention always comes between two layers' experts): draw the
      // experts of lower ep ranks before it and those of higher ones after.
      size_t end = i;
      while (end < specs_.size() && specs_[end].expert >= 0) ++end;
      std::vector<const ParameterSpec*> one_expert;
      for (size_t j = i; j < end && specs_[j].expert == spec.expert; ++j) one_expert.push_back(&specs_[j]);
      const int64_t first = spec.expert, held = static_cast<int64_t>((end - i) / one_expert.size());
      draw_missing_experts(0, first, one_expert);
      for (size_t j = i; j < end; ++j) initialise(specs_[j]);
      draw_missing_experts(first + held, spec.experts, one_expert);
      i = end - 1;
    }
  for (const auto& spec : specs_) {
    if (spec.adapter) initialise(spec);
    else if (!spec.trainable) parameters[spec.name].set_requires_grad(false);
  }
}

int LlamaModelImpl::tp_rank() const { return layers_->tp.rank; }
int LlamaModelImpl::tp_size() const { return layers_->tp.size; }
int LlamaModelImpl::sp_size() const { return layers_->sp.size; }

SequenceShard LlamaModelImpl::sequence_shard(int64_t length, torch::Device device) const {
  return meshrun::sequence_shard(length, layers_->sp.rank, layers_->sp.size, device);
}
torch::Tensor LlamaModelImpl::whole_rows(const torch::Tensor& local, int64_t length) const {
  if (!layers_->sp.split()) return local;
  return gather_columns(local, sequence_shard(length, local.device()), layers_->sp.group);
}
void LlamaModelImpl::set_adapters_enabled(bool on) {
  for (const auto& module : modules(/*include_self=*/false))
    if (auto* linear = dynamic_cast<model_detail::LinearImpl*>(module.get())) linear->set_adapter_enabled(on);
}

void LlamaModelImpl::capture_routes(std::vector<torch::Tensor>* into) { layers_->route_capture = into; }

RouterStats LlamaModelImpl::router_stats() const {
  const RouterRecord& record = layers_->router;
  if (record.prob_sums.empty()) return {};
  // As load_balancing_loss_func: counts and probabilities summed over
  // layers and divided by every layer's tokens, then their dot product.
  // With sp, over the whole rows: every sp rank's columns summed.
  const SequenceParallel& sp = layers_->sp;
  const int64_t experts = record.counts.front().size(0);
  torch::Tensor counted = torch::cat({torch::stack(record.counts).flatten(), torch::stack(record.rows)});
  if (sp.split()) sp.group->all_reduce(counted);
  const int64_t layers = static_cast<int64_t>(record.counts.size());
  const torch::Tensor counts = counted.narrow(0, 0, layers * experts).view({layers, experts});
  const torch::Tensor rows = counted.narrow(0, layers * experts, layers).sum().clamp_min(1);
  const torch::Tensor prob_sums = sum_over_sequence(torch::stack(record.prob_sums).sum(0), sp);
  const torch::Tensor assigned = counts.sum(0) / rows, probability = prob_sums / rows;
  RouterStats stats;
  stats.aux_loss = (assigned * probability).sum() * static_cast<double>(counts.size(1));
  stats.expert_load_max = (counts.amax(1) / counts.mean(1).clamp_min(1e-9)).amax();
  if (!record.replays.empty())
    stats.replayed_routes = torch::cat({torch::stack(record.replays).sum(0), torch::stack(record.rows).sum().reshape({1})});
  return stats;
}

int LlamaModelImpl::num_units() const { return static_cast<int>(options_.config.layers) + 2; }

torch::Tensor LlamaModelImpl::head_input(const ModelInputs& in) {
  Layers& m = *layers_;
  const ModelConfig& c = options_.config;
  check_inputs(in, c.vocab);
  const int64_t seq = in.input_ids.size(1);
  const torch::Device device = in.input_ids.device();

  AttentionInputs shared;
  torch::Tensor input_ids = in.input_ids;
  const bool plain = !in.position_ids.defined() && !in.sequence_ids.defined() && !in.attention_mask.defined();
  if (m.sp.split()) {
    // Positions, padding and packing from the whole row, then this rank's
    // columns of them; padding the row to the chunking adds keys nobody
    // attends to (masked as padding) and queries whose outputs callers drop.
    const SequenceShard shard = sequence_shard(seq, device);
    const auto index_options = torch::TensorOptions().dtype(torch::kInt64).device(device);
    torch::Tensor padding = in.attention_mask.defined() ? in.attention_mask.ne(0).to(torch::kInt64)
                                                        : torch::ones_like(in.input_ids);
    torch::Tensor positions = in.position_ids;
    if (!positions.defined() && in.attention_mask.defined())
      positions = (padding.cumsum(-1) - 1).clamp_min_(0);
    if (!positions.defined()) positions = torch::arange(seq, index_options).unsqueeze(0).expand_as(in.input_ids);
    const int64_t extra = shard.padded - seq, batch = in.input_ids.size(0);
    auto pad = [&](const torch::Tensor& t, int64_t value) {
      return extra == 0 ? t : torch::cat({t, torch::full({batch, extra}, value, t.options())}, 1);
    };
    padding = pad(padding, 0);
    const torch::Tensor sequence_ids = in.sequence_ids.defined() ? pad(in.sequence_ids, -1) : torch::Tensor();
    const int64_t max_position =
        positions.numel() == 0 || !rope_depends_on_length(c) ? 0 : positions.max().item<int64_t>();
    const torch::Tensor local_positions = pad(positions, 0).index_select(1, shard.local);
    set_ropes(c, shared, [&](const ModelConfig& config) {
      return rotary_tables(config, local_positions, options_.dtype, max_position);
    });
    set_masks(c, shared, [&](const ModelConfig& config) {
      return attention_mask_between(config, shard.local, torch::arange(shard.padded, index_options), sequence_ids,
                                    in.attention_mask.defined() || extra > 0 ? padding : torch::Tensor(),
                                    options_.dtype);
    });
    shared.sp = m.sp;
    shared.sp_key_order = torch::argsort(shard.gathered);
    shared.sp_query_columns = shard.local.cpu().contiguous();
    input_ids = pad(in.input_ids, 0).index_select(1, shard.local);
    if (in.attention_mask.defined() || extra > 0)
      shared.token_weights = padding.index_select(1, shard.local).reshape(-1).to(torch::kFloat32);
  } else if (plain && m.cached_length == seq && m.cached.mask.device() == device) {
    shared = m.cached;
  } else {
    torch::Tensor positions = in.position_ids;
    if (!positions.defined() && in.attention_mask.defined())
      positions = (in.attention_mask.ne(0).to(torch::kInt64).cumsum(-1) - 1).clamp_min_(0);
    if (!positions.defined()) positions = torch::arange(seq, torch::TensorOptions().dtype(torch::kInt64).device(device)).unsqueeze(0);
    set_ropes_at(c, {m.decode_inverse, m.decode_window_inverse}, shared, positions, options_.dtype);
    set_masks(c, shared, [&](const ModelConfig& config) {
      return attention_mask(config, seq, in.sequence_ids, in.attention_mask, options_.dtype, device);
    });
    // The full-attention layers' mask, when plain (windowed layers take window_mask).
    shared.causal_only = plain && (c.sliding_window == 0 || c.mixed_windows());
    if (plain) {
      m.cached = shared;
      m.cached_length = seq;
    }
    if (in.attention_mask.defined()) shared.token_weights = in.attention_mask.ne(0).reshape(-1).to(torch::kFloat32);
  }
  m.router.clear();
  if (c.mixture_of_experts()) {
    shared.router = &m.router;
    shared.route_capture = m.route_capture;
    if (in.routes.defined()) {
      const int64_t batch = in.input_ids.size(0), sparse = c.sparse_layers();
      if (in.routes.dim() != 4 || in.routes.size(0) != batch || in.routes.size(1) != seq ||
          in.routes.size(2) != sparse || in.routes.size(3) != c.experts_per_token)
        throw std::logic_error("routes must be int64 [batch, seq, sparse layers " + std::to_string(sparse) +
                               ", experts_per_token " + std::to_string(c.experts_per_token) + "], got " +
                               c10::str(in.routes.sizes()));
      torch::Tensor routes = in.routes.to(torch::kInt64);
      if (m.sp.split()) {
        const SequenceShard shard = sequence_shard(seq, device);
        const int64_t extra = shard.padded - seq;
        if (extra > 0)
          routes = torch::cat({routes, torch::full({batch, extra, sparse, c.experts_per_token}, -1, routes.options())}, 1);
        routes = routes.index_select(1, shard.local);
      }
      // Each replayed expert must exist: a route from another model is a bug.
      if (routes.numel() > 0 && routes.max().item<int64_t>() >= c.experts)
        throw ModelInputError("a replayed route names expert " + std::to_string(routes.max().item<int64_t>()) +
                              " of a model with " + std::to_string(c.experts));
      shared.routes = routes.reshape({-1, sparse, c.experts_per_token});
    }
  }

  auto before = [&](int unit) {
    if (hooks_) hooks_->before_unit(unit);
  };
  auto after = [&](int unit, torch::Tensor output) {
    return hooks_ ? hooks_->after_unit(unit, std::move(output)) : output;
  };

  before(0);
  torch::Tensor hidden = after(0, m.embed->forward(input_ids));
  const bool checkpoint = options_.gradient_checkpointing && torch::GradMode::is_enabled();
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const int unit = static_cast<int>(i) + 1;
    before(unit);
    hidden = checkpoint ? checkpointed_layer(*m.layers[i], hidden, shared, hooks_, unit)
                        : m.layers[i]->forward(hidden, shared);
    hidden = after(unit, std::move(hidden));
  }
  before(num_units() - 1);
  return m.norm->forward(hidden);
}

torch::Tensor LlamaModelImpl::forward(const ModelInputs& in) {
  Layers& m = *layers_;
  const torch::Tensor hidden = head_input(in);
  torch::Tensor out;
  if (options_.head == ModelHead::value) {
    out = at::linear(hidden, m.head->weight).squeeze(-1);
  } else {
    const torch::Tensor& weight = m.head ? m.head->weight : m.embed->weight;
    out = soft_cap(at::linear(copy_to_tensor_parallel(hidden, m.tp), weight), options_.config.final_softcap);
  }
  const int last = num_units() - 1;
  return hooks_ ? hooks_->after_unit(last, std::move(out)) : out;
}

HeadOutputs LlamaModelImpl::forward_log_probs(const ModelInputs& in, const torch::Tensor& labels,
                                              const FusedHeadOptions& options, int64_t first_column) {
  if (options_.head != ModelHead::language_model)
    throw std::logic_error("forward_log_probs: the model has a value head");
  Layers& m = *layers_;
  torch::Tensor hidden = head_input(in);
  if (labels.dim() != 2 || labels.size(0) != hidden.size(0) || first_column < 0 ||
      first_column + labels.size(1) > hidden.size(1))
    throw std::logic_error("forward_log_probs: labels " + c10::str(labels.sizes()) + " from column " +
                           std::to_string(first_column) + " of " + std::to_string(hidden.size(1)));
  if (first_column != 0 || labels.size(1) != hidden.size(1)) hidden = hidden.narrow(1, first_column, labels.size(1));
  const torch::Tensor& weight = m.head ? m.head->weight : m.embed->weight;
  // The head's two outputs leave its unit as one tensor, so the unit hooks
  // (ZeRO-3's re-gather before backward) see a single output.
  FusedHeadOptions head = options;
  head.logit_softcap = options_.config.final_softcap;
  HeadOutputs out = fused_head(copy_to_tensor_parallel(hidden, m.tp), weight, labels, m.tp.group, head);
  if (!hooks_) return out;
  torch::Tensor joined = options.entropy ? torch::stack({out.log_probs, out.entropy}) : out.log_probs.unsqueeze(0);
  joined = hooks_->after_unit(num_units() - 1, std::move(joined));
  return HeadOutputs{joined[0], options.entropy ? joined[1] : torch::Tensor()};
}

torch::Tensor LlamaModelImpl::forward_loss_sum(const ModelInputs& in, const torch::Tensor& labels,
                                               const FusedHeadOptions& options) {
  if (options_.head != ModelHead::language_model)
    throw std::logic_error("forward_loss_sum: the model has a value head");
  Layers& m = *layers_;
  const torch::Tensor hidden = head_input(in);
  if (labels.dim() != 2 || labels.size(0) != hidden.size(0) || labels.size(1) != hidden.size(1))
    throw std::logic_error("forward_loss_sum: labels " + c10::str(labels.sizes()) + " for " +
                           std::to_string(hidden.size(1)) + " columns");
  const torch::Tensor& weight = m.head ? m.head->weight : m.embed->weight;
  FusedHeadOptions head = options;
  head.logit_softcap = options_.config.final_softcap;
  torch::Tensor loss = fused_head_loss_sum(copy_to_tensor_parallel(hidden, m.tp), weight, labels, m.tp.group, head);
  return hooks_ ? hooks_->after_unit(num_units() - 1, std::move(loss)) : loss;
}

torch::Tensor LlamaModelImpl::forward_paged(const torch::Tensor& input_ids, const std::vector<int64_t>& past,
                                            const torch::Tensor& block_tables, PagedKvCache& cache) {
  const DecodeStepScope decode_step;
  Layers& m = *layers_;
  const ModelConfig& c = options_.config;
  check_inputs(ModelInputs{input_ids, {}, {}, {}}, c.vocab, /*read_ids=*/!input_ids.is_cuda());
  if (m.sp.split()) throw std::logic_error("a sequence-parallel model does not generate (forward_paged)");
  const int64_t batch = input_ids.size(0), fresh = input_ids.size(1), block = cache.block_size();
  if (batch < 1 || fresh < 1 || static_cast<int64_t>(past.size()) != batch || block_tables.dim() != 2 ||
      block_tables.size(0) != batch)
    throw std::logic_error("forward_paged: " + std::to_string(batch) + " rows of " + std::to_string(fresh) +
                           " tokens with " + std::to_string(past.size()) + " lengths and block tables " +
                           c10::str(block_tables.sizes()));
  int64_t longest = 0;
  for (const int64_t length : past) {
    if (length < 0) throw std::logic_error("forward_paged: a row of " + std::to_string(length) + " tokens");
    longest = std::max(longest, length + fresh);
  }
  if (longest > block_tables.size(1) * block)
    throw std::logic_error("forward_paged: " + std::to_string(longest) + " tokens but the block tables cover " +
                           std::to_string(block_tables.size(1) * block));
  // Every entry lies in the pool (the gathering path reads each row's up to
  // the longest). Checked where the tables are built (on the host), so that
  // a device-side table costs no sync here.
  if (!block_tables.is_cuda()) {
    const torch::Tensor host_tables = block_tables.to(torch::kInt64).contiguous();
    const int64_t* entry = host_tables.const_data_ptr<int64_t>();
    for (int64_t i = 0; i < host_tables.numel(); ++i)
      if (entry[i] < 0 || entry[i] >= cache.blocks())
        throw std::logic_error("forward_paged: row " + std::to_string(i / host_tables.size(1)) + " names block " +
                               std::to_string(entry[i]) + " outside the pool of " + std::to_string(cache.blocks()));
    if (fresh == 1 && decode_layers_fuse()) return forward_cpu_decode(input_ids, past, host_tables, cache, longest);
  }
  const torch::Device device = input_ids.device();
  const auto index_options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const torch::Tensor tables = block_tables.to(index_options);
  // Query i of row b is token past[b] + i; it sees keys up to itself.
  const torch::Tensor positions =
      torch::tensor(past, torch::kInt64).to(device).unsqueeze(1) + torch::arange(fresh, index_options).unsqueeze(0);

  AttentionInputs shared;
  // The longest row's last position, known here: rotary_tables need not read it back from the device.
  set_ropes(c, shared,
            [&](const ModelConfig& config) { return rotary_tables(config, positions, options_.dtype, longest - 1); });
  set_masks(c, shared, [&](const ModelConfig& config) {
    return slot_attention_mask(config, positions, longest, options_.dtype);
  });
  shared.paged = &cache;
  shared.kv_write_index = pool_slots(tables, positions, block);
  if (c.attn_softcap == 0 && cpu_paged_decode_attention_serves(device, options_.dtype, fresh)) {
    shared.kv_host_tables = tables;
    shared.kv_host_positions = positions.view(-1);
  } else {
    shared.kv_read_index = pool_slots(tables, torch::arange(longest, index_options).unsqueeze(0), block);
  }
  shared.kv_keys = longest;
  return paged_layers_and_head(input_ids, shared);
}

torch::Tensor LlamaModelImpl::forward_paged_decode(const torch::Tensor& tokens, const torch::Tensor& positions,
                                                   const torch::Tensor& block_tables, PagedKvCache& cache) {
  const DecodeStepScope decode_step;
  Layers& m = *layers_;
  const ModelConfig& c = options_.config;
  if (const std::string blocker = decode_graph_blocker(c, m.tp.size); !blocker.empty())
    throw std::logic_error("forward_paged_decode: " + blocker);
  if (m.sp.split()) throw std::logic_error("a sequence-parallel model does not generate (forward_paged_decode)");
  const int64_t batch = tokens.size(0), block = cache.block_size();
  const torch::Device device = options_.device;
  const auto on_device = [&](const torch::Tensor& t) {
    return t.scalar_type() == torch::kInt64 && t.device() == device;
  };
  if (tokens.dim() != 2 || tokens.size(1) != 1 || positions.sizes() != tokens.sizes() || block_tables.dim() != 2 ||
      block_tables.size(0) != batch || block_tables.size(1) < 1 || !on_device(tokens) || !on_device(positions) ||
      !on_device(block_tables))
    throw std::logic_error("forward_paged_decode: tokens " + c10::str(tokens.sizes()) + ", positions " +
                           c10::str(positions.sizes()) + " and block tables " + c10::str(block_tables.sizes()) +
                           ", int64 on " + device.str() + " with one token per row, were wanted");
  const int64_t keys = block_tables.size(1) * block;
  // The rotary frequencies of this model (and of its windowed layers) on
  // the device, made once: copying them from the host inside a capture is
  // not allowed, and decode_graph_blocker() keeps out the scalings whose
  // frequencies change with the position.
  cache_inverse_frequencies(c, {m.decode_inverse, m.decode_window_inverse}, device);
  AttentionInputs shared;
  shared.rope = rotary_tables_from(c, positions, m.decode_inverse, options_.dtype);
  if (c.window_rope_theta > 0)
    shared.window_rope = rotary_tables_from(window_rope_config(c), positions, m.decode_window_inverse, options_.dtype);
  set_masks(c, shared, [&](const ModelConfig& config) {
    return slot_attention_mask(config, positions, keys, options_.dtype);
  });
  shared.paged = &cache;
  shared.kv_write_index = pool_slots(block_tables, positions, block);
  shared.kv_read_index = pool_slots(block_tables, torch::arange(keys, tokens.options()).unsqueeze(0), block);
  shared.kv_keys = keys;
  return paged_layers_and_head(tokens, shared);
}

bool LlamaModelImpl::decode_layers_fuse() const {
  return !layers_->tp.split() && !layers_->sp.split() &&
         cpu_decode_layers_serve(layers_->layers, options_.config, options_.dtype, options_.device);
}

torch::Tensor LlamaModelImpl::forward_cpu_decode(const torch::Tensor& input_ids, const std::vector<int64_t>& past,
                                                 const torch::Tensor& block_tables, PagedKvCache& cache,
                                                 int64_t longest) {
  Layers& m = *layers_;
  const ModelConfig& c = options_.config;
  const int64_t batch = input_ids.size(0);
  CpuDecodeRows step;
  step.rows = batch;
  step.positions = past.data();
  step.tables = block_tables.const_data_ptr<int64_t>();
  step.width = block_tables.size(1);
  step.cache = &cache;
  const RotaryTables rope =
      rotary_tables(c, torch::tensor(past, torch::kInt64).unsqueeze(1), options_.dtype, longest - 1);
  step.rope = {rope.cos.contiguous(), rope.sin.contiguous(), rope.query_cos.contiguous(), rope.query_sin.contiguous()};
  torch::Tensor hidden = m.embed->forward(input_ids).reshape({batch, -1}).contiguous();
  for (size_t i = 0; i < m.layers.size(); ++i)
    hidden = cpu_decode_layer(*m.layers[i], static_cast<int64_t>(i), std::move(hidden), step);
  return paged_head(hidden);
}

torch::Tensor LlamaModelImpl::paged_layers_and_head(const torch::Tensor& input_ids, AttentionInputs& shared) {
  Layers& m = *layers_;
  shared.route_capture = m.route_capture;
  torch::Tensor hidden = m.embed->forward(input_ids);
  for (auto& layer : m.layers) hidden = layer->forward(hidden, shared);
  // Only the last new token's logits: the next token is sampled from them.
  return paged_head(hidden.select(1, input_ids.size(1) - 1));
}

torch::Tensor LlamaModelImpl::paged_head(const torch::Tensor& last_hidden) {
  Layers& m = *layers_;
  const ModelConfig& c = options_.config;
  const torch::Tensor hidden = m.norm->forward(last_hidden);
  if (options_.head == ModelHead::value) return linear_or_small_batch(hidden, m.head->weight).squeeze(-1);
  const torch::Tensor& weight = m.head ? m.head->weight : m.embed->weight;
  return soft_cap(linear_or_small_batch(copy_to_tensor_parallel(hidden, m.tp), weight), c.final_softcap);
}

torch::Tensor LlamaModelImpl::forward_cached(const ModelInputs& in, KvCache& cache) {
  const DecodeStepScope decode_step;
  Layers& m = *layers_;
  const ModelConfig& c = options_.config;
  check_inputs(ModelInputs{in.input_ids, in.position_ids, {}, {}}, c.vocab);
  if (m.sp.split()) throw std::logic_error("a sequence-parallel model does not generate (forward_cached)");
  const int64_t batch = in.input_ids.size(0), fresh = in.input_ids.size(1), past = cache.length();
  const torch::Device device = in.input_ids.device();
  if (batch > cache.batch())
    throw std::logic_error("the batch has " + std::to_string(batch) + " sequences but the KV cache holds " +
                           std::to_string(cache.batch()));
  cache.check_room(fresh);
  torch::Tensor mask = in.attention_mask;
  if (!mask.defined()) mask = torch::ones({batch, past + fresh}, torch::TensorOptions().dtype(torch::kInt64).device(device));
  if (mask.dim() != 2 || mask.size(0) != batch || mask.size(1) != past + fresh)
    throw std::logic_error("attention_mask must be [batch, cached + new] = [" + std::to_string(batch) + ", " +
                           std::to_string(past + fresh) + "], got " + c10::str(mask.sizes()));
  torch::Tensor positions = in.position_ids;
  if (!positions.defined())
    positions = (mask.ne(0).to(torch::kInt64).cumsum(-1) - 1).clamp_min_(0).narrow(1, past, fresh);

  AttentionInputs shared;
  set_ropes(c, shared, [&](const ModelConfig& config) { return rotary_tables(config, positions, options_.dtype); });
  set_masks(c, shared, [&](const ModelConfig& config) {
    return cached_attention_mask(config, past, fresh, mask, options_.dtype);
  });
  shared.cache = &cache;
  shared.route_capture = layers_->route_capture;
  torch::Tensor hidden = m.embed->forward(in.input_ids);
  for (auto& layer : m.layers) hidden = layer->forward(hidden, shared);
  cache.advance(fresh);
  hidden = m.norm->forward(hidden);
  if (options_.head == ModelHead::value) return linear_or_small_batch(hidden, m.head->weight).squeeze(-1);
  const torch::Tensor& weight = m.head ? m.head->weight : m.embed->weight;
  return soft_cap(linear_or_small_batch(copy_to_tensor_parallel(hidden, m.tp), weight), c.final_softcap);
}

}  // namespace meshrun
