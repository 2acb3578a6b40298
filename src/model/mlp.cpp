// The SwiGLU MLP, down(silu(gate(x)) × up(x)); gate and up column-parallel,
// down row-parallel. The mixture of experts built from it (router, top-k,
// weighted sum). And the decoder layer around attention and MLP.
#include "layers.hpp"
#include "meshrun/model/expert_placement.hpp"

namespace meshrun::model_detail {

MlpImpl::MlpImpl(int64_t hidden, int64_t width, bool bias, const TensorParallel& tp,
                 const torch::TensorOptions& options, MlpNames names, bool gelu)
    : tp_(tp), gelu_(gelu) {
  const int64_t local = width / tp.size;
  // Registered in the order of hf_parameters (hf_model_dir.cpp).
  gate_proj = register_module(names.gate, Linear(hidden, local, bias, options));
  up_proj = register_module(names.up, Linear(hidden, local, bias, options));
  down_proj = register_module(names.down, Linear(local, hidden, bias, options));
}

torch::Tensor MlpImpl::partial(const torch::Tensor& input) {
  const std::vector<torch::Tensor> projected = forward_sharing_input(input, {gate_proj.get(), up_proj.get()});
  const torch::Tensor activated =
      gelu_ ? at::gelu(projected[0], "tanh") * projected[1] : swiglu(projected[0], projected[1]);
  return down_proj->adapted(activated, linear_or_small_batch(activated, down_proj->weight));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  torch::Tensor out = reduce_from_tensor_parallel(partial(copy_to_tensor_parallel(x, tp_)), tp_);
  if (down_proj->bias.defined()) out = out + down_proj->bias;
  return out;
}

const char* experts_module(ModelFamily family) {
  return model_family_row(family).experts == ExpertNames::block_sparse_moe ? "block_sparse_moe" : "mlp";
}

MlpNames expert_names(ModelFamily family) {
  return model_family_row(family).experts == ExpertNames::block_sparse_moe ? MlpNames{"w1", "w3", "w2"} : MlpNames{};
}

SparseMoeImpl::SparseMoeImpl(const ModelConfig& config, const TensorParallel& tp, const ExpertParallel& ep,
                             const torch::TensorOptions& options, int64_t sparse_index)
    : tp_(tp), ep_(ep), top_k_(config.experts_per_token), experts_total_(config.experts),
      sparse_index_(sparse_index), renormalise_(config.norm_topk_prob) {
  if (config.experts % ep.size != 0)
    throw ModelConfigError(std::string(model_family_row(config.family).experts_key) + " " +
                           std::to_string(config.experts) + " is not divisible by the expert-parallel size " +
                           std::to_string(ep.size));
  gate = register_module("gate", Linear(config.hidden, config.experts, false, options));
  // A plain module, not a ModuleList: children keep their global indices.
  auto list = register_module("experts", std::make_shared<torch::nn::Module>());
  const MlpNames names = expert_names(config.family);
  const ExpertPlacement placement{static_cast<int>(config.experts), ep.size};
  for (int e = placement.first_of(ep.rank); e < placement.first_of(ep.rank + 1); ++e) {
    experts.push_back(Mlp(config.hidden, config.expert_intermediate, false, tp, options, names,
                          config.hidden_act == "gelu_pytorch_tanh"));
    list->register_module(std::to_string(e), experts.back());
  }
}

torch::Tensor SparseMoeImpl::forward(const torch::Tensor& x, RouterRecord* record, const torch::Tensor& token_weights,
                                     const torch::Tensor& routes, std::vector<torch::Tensor>* route_capture) {
  const int64_t hidden = x.size(-1), count = experts_total_;
  const torch::Tensor flat = x.reshape({-1, hidden});
  const int64_t tokens = flat.size(0);
  // As transformers' routers: softmax over every expert in fp32, then the top k.
  const torch::Tensor probs = torch::softmax(at::linear(flat, gate->weight), -1, torch::kFloat32);
  auto [top, picked] = probs.topk(top_k_, -1);
  if (routes.defined()) {
    // Routing replay (R3): the given experts, weighed by this router's
    // probabilities of them; tokens without a replayed route keep their own.
    const torch::Tensor given = routes.select(1, sparse_index_).to(picked.device());
    const torch::Tensor replayed = given.select(1, 0).ge(0);
    if (record) {
      // A flip: the router's own top k is another set of experts.
      const torch::Tensor own = std::get<0>(picked.sort(1)), taken = std::get<0>(given.sort(1));
      const torch::Tensor flipped = own.ne(taken).any(1).logical_and(replayed);
      record->replays.push_back(torch::stack({replayed.sum(), flipped.sum()}).to(torch::kFloat32));
    }
    picked = torch::where(replayed.unsqueeze(1), given, picked);
    top = probs.gather(1, picked);
  }
  if (route_capture) route_capture->push_back(picked.detach());
  if (renormalise_) top = top / top.sum(-1, /*keepdim=*/true);
  const torch::Tensor picks = picked.reshape(-1);  // [tokens × k], token-major
  const torch::Tensor per_expert = torch::bincount(picks, {}, count);
  if (record) {
    torch::Tensor counts, prob_sum, rows;
    if (token_weights.defined()) {
      const torch::Tensor w = token_weights.to(torch::kFloat32);
      counts = torch::zeros({count}, w.options()).scatter_add_(0, picks, w.repeat_interleave(top_k_));
      prob_sum = (probs * w.unsqueeze(1)).sum(0);
      rows = w.sum();
    } else {
      counts = per_expert.to(torch::kFloat32);
      prob_sum = probs.sum(0);
      rows = torch::full({}, static_cast<double>(tokens), probs.options());
    }
    record->prob_sums.push_back(prob_sum);
    record->counts.push_back(counts.detach());
    record->rows.push_back(rows.detach());
  }
  // The routing weights are replicated over tp but multiply each rank's
  // partial expert outputs: copy_to_tensor_parallel sums their gradient
  // over the group in backward, so the router's gradient is whole.
  const torch::Tensor weights = copy_to_tensor_parallel(top.to(x.scalar_type()), tp_).reshape(-1);
  // Assignments grouped by expert (stable: each expert's tokens in order);
  // the group sizes are read once per layer to cut the groups.
  const torch::Tensor order = picks.argsort(/*stable=*/true);
  const torch::Tensor token_of = order.div(top_k_, "floor");
  const torch::Tensor weight_of = weights.index_select(0, order).unsqueeze(1);
  const torch::Tensor input = copy_to_tensor_parallel(flat, tp_);
  if (ep_.split()) {
    const torch::Tensor outputs = dispatched(input.index_select(0, token_of), per_expert) * weight_of;
    torch::Tensor out = torch::zeros({tokens, hidden}, x.options()).index_add(0, token_of, outputs);
    return reduce_from_tensor_parallel(out, tp_).view(x.sizes());
  }
  const torch::Tensor sizes = per_expert.cpu();
  const auto* size = sizes.const_data_ptr<int64_t>();
  std::vector<torch::Tensor> outputs;
  outputs.reserve(experts.size());
  int64_t start = 0;
  for (int64_t e = 0; e < count; ++e) {
    // An expert no token picked still runs (on no rows), so every expert's
    // parameters get a gradient, zero, as the engine's buffers expect.
    const torch::Tensor rows = token_of.narrow(0, start, size[e]);
    outputs.push_back(experts[e]->partial(input.index_select(0, rows)) * weight_of.narrow(0, start, size[e]));
    start += size[e];
  }
  torch::Tensor out = torch::zeros({tokens, hidden}, x.options()).index_add(0, token_of, torch::cat(outputs));
  return reduce_from_tensor_parallel(out, tp_).view(x.sizes());
}

torch::Tensor SparseMoeImpl::dispatched(const torch::Tensor& sorted, const torch::Tensor& per_expert) {
  const int64_t local = static_cast<int64_t>(experts.size());
  const int ranks = ep_.size;
  // Each rank's counts for the experts of every rank, exchanged: received
  // [ranks × local] holds, from each source rank, its rows for each of my
  // experts. One host read of both lists cuts every segment below.
  const torch::Tensor received = ep_.group->all_to_all(per_expert, std::vector<int64_t>(ranks, local),
                                                      std::vector<int64_t>(ranks, local));
  const torch::Tensor counts = torch::cat({per_expert, received}).cpu();
  const auto* sent_per_expert = counts.const_data_ptr<int64_t>();
  const auto* received_per_expert = sent_per_expert + experts_total_;
  std::vector<int64_t> send(ranks, 0), receive(ranks, 0);
  for (int r = 0; r < ranks; ++r)
    for (int64_t l = 0; l < local; ++l) {
      send[r] += sent_per_expert[r * local + l];
      receive[r] += received_per_expert[r * local + l];
    }
  const torch::Tensor arrived = all_to_all_rows(sorted, send, receive, ep_.group);
  // Arrivals come by source rank, then expert: regroup them by expert.
  std::vector<int64_t> source_start(static_cast<size_t>(ranks) * local);
  int64_t at = 0;
  for (int r = 0; r < ranks; ++r)
    for (int64_t l = 0; l < local; ++l) source_start[r * local + l] = at, at += received_per_expert[r * local + l];
  const auto index_options = torch::TensorOptions().dtype(torch::kInt64);
  std::vector<int64_t> by_expert;
  by_expert.reserve(static_cast<size_t>(at));
  std::vector<int64_t> rows_of(local, 0);
  for (int64_t l = 0; l < local; ++l)
    for (int r = 0; r < ranks; ++r) {
      const int64_t start = source_start[r * local + l], rows = received_per_expert[r * local + l];
      for (int64_t i = 0; i < rows; ++i) by_expert.push_back(start + i);
      rows_of[l] += rows;
    }
  const torch::Tensor gather = torch::tensor(by_expert, index_options).to(arrived.device());
  const torch::Tensor grouped = arrived.index_select(0, gather);
  std::vector<torch::Tensor> outputs;
  outputs.reserve(experts.size());
  int64_t start = 0;
  for (int64_t l = 0; l < local; ++l) {
    // An expert nothing reached still runs, on no rows (see forward).
    outputs.push_back(experts[l]->partial(grouped.narrow(0, start, rows_of[l])));
    start += rows_of[l];
  }
  // Back to arrival order, then to the ranks the rows came from.
  const torch::Tensor computed = torch::cat(outputs);
  const torch::Tensor in_arrival_order =
      torch::zeros({at, computed.size(1)}, computed.options()).index_add(0, gather, computed);
  return all_to_all_rows(in_arrival_order, receive, send, ep_.group);
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& config, const TensorParallel& tp, const ExpertParallel& ep,
                                   const torch::TensorOptions& options, int64_t layer_index) {
  const auto norm = [&] { return RmsNorm(config.hidden, config.rms_norm_eps, options, config.norm_plus_one); };
  // Registered in the order of hf_parameters (hf_model_dir.cpp).
  if (!config.post_norms) input_layernorm = register_module("input_layernorm", norm());
  self_attn = register_module("self_attn", Attention(config, tp, options, layer_index));
  post_attention_layernorm = register_module("post_attention_layernorm", norm());
  if (config.sandwich_norms) pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", norm());
  if (config.sparse_layer(layer_index)) {
    int64_t sparse_index = 0;
    for (int64_t before = 0; before < layer_index; ++before) sparse_index += config.sparse_layer(before) ? 1 : 0;
    moe = register_module(experts_module(config.family), SparseMoe(config, tp, ep, options, sparse_index));
  } else {
    mlp = register_module("mlp", Mlp(config.hidden, config.intermediate, config.mlp_bias, tp, options, MlpNames{},
                                     config.hidden_act == "gelu_pytorch_tanh"));
  }
  if (config.post_norms || config.sandwich_norms) post_feedforward_layernorm = register_module("post_feedforward_layernorm", norm());
}

torch::Tensor DecoderLayerImpl::feed_forward(const torch::Tensor& x, const AttentionInputs& inputs) {
  return moe ? moe->forward(x, inputs.router, inputs.token_weights, inputs.routes, inputs.route_capture)
             : mlp->forward(x);
}

bool DecoderLayerImpl::plain() const {
  return input_layernorm && !input_layernorm->plus_one() && !pre_feedforward_layernorm && !post_feedforward_layernorm &&
         !post_attention_layernorm->plus_one() && mlp && mlp->plain() && self_attn->plain();
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const AttentionInputs& inputs) {
  // The residual add and the norm after it are one node (add_and_forward:
  // one kernel on CUDA).
  if (pre_feedforward_layernorm) {
    const AddedNorm h = pre_feedforward_layernorm->add_and_forward(
        x, post_attention_layernorm->forward(self_attn->forward(input_layernorm->forward(x), inputs)));
    return h.sum + post_feedforward_layernorm->forward(feed_forward(h.normed, inputs));
  }
  if (post_feedforward_layernorm) {
    const torch::Tensor h = x + post_attention_layernorm->forward(self_attn->forward(x, inputs));
    return h + post_feedforward_layernorm->forward(feed_forward(h, inputs));
  }
  const AddedNorm h = post_attention_layernorm->add_and_forward(x, self_attn->forward(input_layernorm->forward(x), inputs));
  return h.sum + feed_forward(h.normed, inputs);
}

}  // namespace meshrun::model_detail
