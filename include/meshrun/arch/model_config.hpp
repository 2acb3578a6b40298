// ModelConfig: the shape and numerics of a Llama-style decoder (Llama,
// Qwen2, Qwen3, Mistral, Phi-3/Phi-4, OLMo 2, and the mixtures of experts
// Qwen3-MoE, Mixtral and OLMoE), read from and written to a Hugging Face config.json, or
// taken from a built-in preset ("builtin:tiny", "builtin:small"). Torch-free:
// the planner's Architecture derives from it, so there is one config.json
// parser for planning and for building the model.
//
// Invariants of a validated config: every
// size is positive, head_dim is even and hidden = heads × head_dim unless
// config.json names its own head_dim (Qwen3's 0.6B: 16 heads of 128 over a
// hidden size of 1024), heads is a multiple of kv_heads (grouped-query
// attention), rope_scaling has the keys its type needs, and a mixture of
// experts picks 1 to `experts` of them per token. Field names follow the planner's
// (hidden, layers, ...); the Hugging Face key of each is noted.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include "meshrun/error.hpp"

namespace meshrun {

// A config.json that cannot be used: the message names the file and key.
class ModelConfigError : public KindError<ErrorKind::model> {
 public:
  using KindError::KindError;
};

enum class ModelHead { language_model, value };

// The model families meshrun builds: one row each says how config.json
// names the family and where its layers differ from Llama's.
enum class ModelFamily { llama, qwen2, qwen3, mistral, phi3, olmo2, qwen3_moe, mixtral, olmoe, gemma2, gemma3_text };

// Where a mixture-of-experts family keeps its router and experts: none
// (a dense family); mlp: "mlp.gate" and "mlp.experts.N.{gate,up,down}_proj"
// (Qwen3-MoE, OLMoE); block_sparse_moe: "block_sparse_moe.gate" and
// "block_sparse_moe.experts.N.{w1,w3,w2}" (Mixtral).
enum class ExpertNames { none, mlp, block_sparse_moe };

// When a family's sliding_window key applies.
// when_enabled: use_sliding_window; per_layer: on the layers layer_types
// marks "sliding_attention" (default: every other one, from the first).
enum class WindowRule { never, always, when_enabled, per_layer };

// rope_scaling of config.json ("type" or "rope_type"). The frequencies and
// the scale on cos and sin follow transformers' rope_utils, except where
// noted at factor.
struct RopeScaling {
  enum class Type { none, linear, dynamic, llama3, yarn, longrope };
  Type type = Type::none;
  // yarn takes the factor as given, as vLLM and the YaRN paper do;
  // transformers replaces it by max_position_embeddings /
  // original_max_position_embeddings when rope_scaling names the latter:
  // the same number in DeepSeek's configs, not in Qwen's, whose
  // max_position_embeddings is the original context.
  double factor = 1.0;
  double low_freq_factor = 1.0;             // llama3
  double high_freq_factor = 4.0;            // llama3
  // original_max_position_embeddings: llama3 needs it; yarn and longrope
  // fall back to max_position_embeddings when it is 0 (not in the file);
  // read it through ModelConfig::rope_original_context().
  int64_t original_max_position = 0;
  // yarn: the band between beta_fast and beta_slow rotations over the
  // original context is blended from interpolated to extrapolated
  // frequencies; truncate rounds the band's ends outward.
  double beta_fast = 32.0, beta_slow = 1.0;
  bool truncate = true;
  std::optional<double> mscale, mscale_all_dim;  // yarn (DeepSeek): the default attention_factor's ratio
  // yarn, longrope: the scale on cos and sin; absent: derived from the
  // factor (ModelConfig::rope_attention_factor()).
  std::optional<double> attention_factor;
  // longrope (Phi-3 128k, Phi-3.5): per-frequency divisors, head_dim / 2
  // each; long_factor once a forward's positions pass the original context.
  std::vector<double> short_factor, long_factor;
  // longrope: whether config.json gave `factor` (else the factor is
  // max_position_embeddings / the original context) and whether
  // original_max_position_embeddings sat at its top level (Phi3Config's
  // place) rather than inside rope_scaling; both written back as read.
  bool factor_given = true;
  bool original_at_top_level = false;
};

struct ModelFamilyRow {
  ModelFamily id;
  std::string_view model_type;    // config.json's model_type
  std::string_view architecture;  // "Qwen2": Qwen2ForCausalLM, Qwen2ForSequenceClassification
  bool qkv_bias_always;           // q/k/v biases whatever attention_bias says (Qwen2)
  bool writes_attention_bias;     // its config.json has attention_bias
  bool writes_mlp_bias;           // its config.json has mlp_bias
  bool qk_norm;                   // q_norm / k_norm per head (Qwen3)
  // Its files store q/k/v as one self_attn.qkv_proj (rows q, k, v) and
  // gate/up as one mlp.gate_up_proj (rows gate, up), without biases. The
  // model keeps them apart: the files are split on loading and fused on
  // saving (hf_model_dir.cpp).
  bool fused_projections;
  WindowRule window;
  // The one rope_scaling type its config class takes (Phi3Config:
  // longrope), or none: every type.
  RopeScaling::Type only_rope_scaling;
  // Its config class's default original_max_position_embeddings (a
  // top-level key; Phi3Config: 4096), or 0.
  int64_t default_original_context;
  // q_norm / k_norm over the whole q and k projections, not per head
  // (OLMo 2: weights of heads × head_dim and kv_heads × head_dim).
  bool qk_norm_full_width;
  // Norms after attention and after the MLP, on their outputs before the
  // residual add, and none before them (OLMo 2's post_attention_layernorm
  // and post_feedforward_layernorm).
  bool post_norms;
  // Mixture of experts: where the experts live (none: a dense family), the
  // config.json keys of their number and width, whether the top-k routing
  // weights are always renormalised to sum to 1 (Mixtral) or when
  // norm_topk_prob says so, whether mlp_only_layers and
  // decoder_sparse_step choose dense layers (Qwen3-MoE), and whether
  // clip_qkv clamps q, k and v (OLMoE).
  ExpertNames experts = ExpertNames::none;
  std::string_view experts_key = {};
  std::string_view expert_intermediate_key = {};
  bool always_norm_topk = false;
  bool dense_layer_keys = false;
  bool clip_qkv = false;
  double default_aux_loss_coef = 0;  // its config class's router_aux_loss_coef
  // Gemma's layers: RMSNorm weights are offsets from 1 (x̂ × (1 + w), in
  // fp32), norms both before and after attention and the MLP
  // ("sandwich"), embeddings scaled by √hidden, soft-capping of attention
  // and final logits (attn_logit_softcapping, final_logit_softcapping) and
  // a query scale of query_pre_attn_scalar^-½; the activation's key.
  bool norm_plus_one = false;
  bool sandwich_norms = false;
  bool scaled_embedding = false;
  bool softcapping = false;
  std::string_view activation_key = "hidden_act";
  // Its config class's soft-caps (Gemma 2: 50, 30) and window pattern (a
  // window on every layer but each pattern-th: Gemma 2 2, Gemma 3 6).
  double default_attn_softcap = 0, default_final_softcap = 0;
  int64_t window_pattern = 2;
  // Rotary settings per layer type (Gemma 3: rope_parameters keyed by
  // full_attention and sliding_attention, or rope_theta with
  // rope_local_base_freq): the windowed layers have their own.
  bool rope_per_layer_type = false;
};

inline constexpr ModelFamilyRow kModelFamilies[] = {
    {ModelFamily::llama, "llama", "Llama", false, true, true, false, false, WindowRule::never, RopeScaling::Type::none, 0, false, false},
    {ModelFamily::qwen2, "qwen2", "Qwen2", true, false, false, false, false, WindowRule::when_enabled, RopeScaling::Type::none, 0, false, false},
    {ModelFamily::qwen3, "qwen3", "Qwen3", false, true, false, true, false, WindowRule::when_enabled, RopeScaling::Type::none, 0, false, false},
    {ModelFamily::mistral, "mistral", "Mistral", false, true, false, false, false, WindowRule::always, RopeScaling::Type::none, 0, false, false},
    {ModelFamily::phi3, "phi3", "Phi3", false, false, false, false, true, WindowRule::always, RopeScaling::Type::longrope, 4096, false, false},
    {ModelFamily::olmo2, "olmo2", "Olmo2", false, true, false, true, false, WindowRule::never, RopeScaling::Type::none, 0, true, true},
    {ModelFamily::qwen3_moe, "qwen3_moe", "Qwen3Moe", false, true, false, true, false, WindowRule::when_enabled, RopeScaling::Type::none, 0, false, false,
     ExpertNames::mlp, "num_experts", "moe_intermediate_size", false, true, false, 0.001},
    {ModelFamily::mixtral, "mixtral", "Mixtral", false, false, false, false, false, WindowRule::always, RopeScaling::Type::none, 0, false, false,
     ExpertNames::block_sparse_moe, "num_local_experts", "intermediate_size", true, false, false, 0.001},
    {ModelFamily::olmoe, "olmoe", "Olmoe", false, true, false, true, false, WindowRule::never, RopeScaling::Type::none, 0, true, false,
     ExpertNames::mlp, "num_experts", "intermediate_size", false, false, true, 0.01},
    {ModelFamily::gemma2, "gemma2", "Gemma2", false, true, false, false, false, WindowRule::per_layer, RopeScaling::Type::none, 0, false, false,
     ExpertNames::none, {}, {}, false, false, false, 0, true, true, true, true, "hidden_activation", 50, 30, 2, false},
    {ModelFamily::gemma3_text, "gemma3_text", "Gemma3", false, true, false, true, false, WindowRule::per_layer, RopeScaling::Type::none, 0, false, false,
     ExpertNames::none, {}, {}, false, false, false, 0, true, true, true, true, "hidden_activation", 0, 0, 6, true},
};

const ModelFamilyRow& model_family_row(ModelFamily family);

struct ModelConfig;
// The layer layout its family's row sets: q/k norms, their width, norm placement.
void apply_family_layout(ModelConfig& config);
// What a config built in code (presets, the planner's table) takes from its
// family's config class where config.json would say it: Gemma 2's windowed
// layers (every other one), soft-caps (50, 30), query scale (head_dim) and
// activation.
void apply_family_defaults(ModelConfig& config);

struct ModelConfig {
  ModelFamily family = ModelFamily::llama;  // config.json's model_type
  int64_t hidden = 0;                // hidden_size
  int64_t layers = 0;                // num_hidden_layers
  int64_t heads = 0;                 // num_attention_heads
  int64_t kv_heads = 0;              // num_key_value_heads (default: heads)
  int64_t intermediate = 0;          // intermediate_size
  int64_t vocab = 0;                 // vocab_size
  int64_t max_position = 0;          // max_position_embeddings; 0: unknown
  bool tied_embeddings = false;      // tie_word_embeddings
  // head_dim, when config.json gives one that is not hidden / heads; 0:
  // hidden / heads. Read it through head_dim().
  int64_t explicit_head_dim = 0;
  bool qkv_bias = false;             // Qwen2 always; Llama's and Qwen3's attention_bias
  bool o_bias = false;               // Llama's and Qwen3's attention_bias
  // RMSNorm over each head's query and key (Qwen3's q_norm, k_norm, weights
  // of head_dim) before the rotary embedding; with qk_norm_full_width over
  // the whole q and k projections (OLMo 2).
  bool qk_norm = false;
  bool qk_norm_full_width = false;
  bool post_norms = false;  // OLMo 2's norms after attention and the MLP (ModelFamilyRow)
  // Gemma's layout (ModelFamilyRow): norms × (1 + w), pre- and post-norms,
  // embeddings × √hidden.
  bool norm_plus_one = false;
  bool sandwich_norms = false;
  bool scaled_embedding = false;
  // Soft-capping, cap × tanh(x / cap), of the attention scores and of the
  // final logits (Gemma 2's attn_logit_softcapping, final_logit_softcapping);
  // 0: none. query_pre_attn_scalar: the attention scale is its -½ power (0:
  // head_dim's).
  double attn_softcap = 0;
  double final_softcap = 0;
  double query_pre_attn_scalar = 0;
  bool mlp_bias = false;             // Llama's mlp_bias
  // Mixture of experts (families whose row has experts): each sparse
  // layer's MLP is `experts` SwiGLU experts of width expert_intermediate
  // (moe_intermediate_size, or intermediate_size where the family has no
  // dense layers), of which a router picks experts_per_token per token
  // (num_experts_per_tok) from a softmax over all of them; norm_topk_prob
  // renormalises the picked weights. router_aux_loss_coef weighs the
  // load-balancing loss in training. Dense layers (Qwen3-MoE's
  // mlp_only_layers, and those decoder_sparse_step skips) keep the dense MLP
  // of width intermediate. experts 0: a dense model.
  int64_t experts = 0;
  int64_t experts_per_token = 0;
  int64_t expert_intermediate = 0;
  bool norm_topk_prob = false;
  double router_aux_loss_coef = 0;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  // OLMoE's clip_qkv: q, k and v clamped to ±clip_qkv after projection; 0: none.
  double clip_qkv = 0;
  double rope_theta = 10000;
  double rms_norm_eps = 1e-6;
  RopeScaling rope_scaling;
  // The windowed layers' own rotary base and scaling (Gemma 3's
  // rope_local_base_freq, or rope_parameters.sliding_attention); 0: theirs
  // are rope_theta and rope_scaling like every layer's.
  double window_rope_theta = 0;
  RopeScaling window_rope_scaling;
  // Attention window (Mistral's and Phi3's sliding_window, Qwen2's with
  // use_sliding_window, Gemma 2's sliding layers); 0: full causal attention.
  // windowed_layers: which layers have it (Gemma 2's layer_types); empty:
  // every layer. Read it through windowed().
  int64_t sliding_window = 0;
  std::vector<bool> windowed_layers;
  double initializer_range = 0.02;
  // The MLP's gate activation: "silu" (SwiGLU) or "gelu_pytorch_tanh"
  // (Gemma's GeGLU with the tanh approximation).
  std::string hidden_act = "silu";
  std::string torch_dtype;  // as written in config.json; empty: not given
  std::optional<int64_t> bos_token_id, pad_token_id;
  // config.json's eos_token_id: one id, or several (Llama 3.1 Instruct names
  // <|end_of_text|>, <|eom_id|> and <|eot_id|>); written back as it was.
  std::vector<int64_t> eos_token_ids;

  std::string_view model_type() const { return model_family_row(family).model_type; }
  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : heads > 0 ? hidden / heads : 0; }
  int64_t kv_dim() const { return kv_heads * head_dim(); }
  // Whether decoder layer `layer` (0-based) has experts in place of the dense MLP.
  bool sparse_layer(int64_t layer) const;
  int64_t sparse_layers() const;
  bool mixture_of_experts() const { return experts > 0; }
  // Whether layer `layer` attends within sliding_window; whether some layers
  // do and others do not (each kind then needs its own mask).
  bool windowed(int64_t layer) const;
  bool mixed_windows() const;
  // The context the rope scaling was fitted to (yarn's and longrope's band
  // edges, longrope's switch to long_factor): original_max_position_embeddings,
  // else max_position_embeddings.
  int64_t rope_original_context() const;
  // The scale yarn and longrope put on cos and sin (1 for the other types).
  double rope_attention_factor() const;
  // Parameters of the language model (embedding, layers, norm, lm_head unless tied).
  int64_t parameters() const;
  // Parameters of decoder layer `layer` (0-based), every expert counted.
  int64_t decoder_layer_parameters(int64_t layer) const;
  // Parameters with a scalar value head ("score.weight", [1, hidden]) in place of the lm_head.
  int64_t parameters_with_value_head() const;
  // Parameters one token's forward uses: parameters() less the experts the
  // router does not pick (the same for a dense model).
  int64_t active_parameters() const;

  // Throws ModelConfigError naming `origin` when the invariants above fail.
  void validate(const std::string& origin) const;
};

// Why the rollout engine's decode step of this model, split over
// `tensor_parallel` ranks, cannot be captured as a CUDA graph (a graph
// replays fixed device work, so the step may not read a value on the host
// nor run collectives); empty when it can. One rule for the plan (which
// says whether an engine uses graphs) and the engine (which runs eagerly
// otherwise).
std::string decode_graph_blocker(const ModelConfig& config, int tensor_parallel);

// Parses config.json text; `origin` (a path) prefixes every error.
ModelConfig model_config_from_json(std::string_view text, const std::string& origin);
// Reads PATH (a config.json). Throws ModelConfigError ("cannot read PATH", ...).
ModelConfig read_model_config(const std::string& path);
// The config.json Hugging Face transformers loads this model from:
// architectures (…ForCausalLM, or LlamaForSequenceClassification with one
// label for the value head), model_type, torch_dtype ("float32", "bfloat16",
// "float16") and every shape key.
std::string model_config_to_json(const ModelConfig& config, ModelHead head, const std::string& torch_dtype);

// The token ids text generation stops at, as transformers' generate and
// vLLM take them: `eos` (the tokenizer's), then eos_token_id (one id or a
// list) of the model's config.json and generation_config.json, without
// repeats. Base models name there the token their chat turns end with
// (Qwen2.5's <|im_end|> beside the tokenizer's <|endoftext|>), so a rollout
// that stopped at `eos` alone would run on past the turn. `model` is a
// directory, a hub name in the local cache or a builtin: preset (which has
// `eos` only). Throws ModelConfigError naming the file for an eos_token_id
// that is not an id or a list of ids.
std::vector<int64_t> generation_stop_ids(const std::string& model, std::optional<int64_t> eos);

// The generation_config.json of a model trained from `base_model`: the
// base's own (a directory or a hub name in the local cache), which carries
// its sampling defaults and chat stop ids, else one transformers would
// derive from `config` (bos, eos and pad ids), else empty (nothing to
// write). Throws ModelConfigError for a base file that is not a JSON object.
std::string generation_config_json(const std::string& base_model, const ModelConfig& config);
// The one derived from `config` alone (empty when it names no token ids).
std::string derived_generation_config_json(const ModelConfig& config);

// "builtin:tiny" / "builtin:small"; nullopt for any other name. Presets use the
// byte-level tokenizer (259 ids), so their vocabulary covers it.
std::optional<ModelConfig> builtin_model_config(std::string_view name);
inline constexpr std::string_view kBuiltinModelPrefix = "builtin:";
// The preset names, for messages.
std::vector<std::string> builtin_model_names();

}  // namespace meshrun
