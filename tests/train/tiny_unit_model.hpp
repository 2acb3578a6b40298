// A small model that follows model.hpp's contract (Hugging Face-style
// names, ParameterSpecs in unit order, unit hooks around each unit) for the
// engine's in-process tests: unit 0 embeds, units 1..L are residual tanh
// layers with a non-decaying scale, unit L+1 is a norm weight and a head.
// It computes in fp32 whatever its parameters' dtype.
#pragma once

#include <torch/torch.h>

#include "meshrun/train/train_engine.hpp"

namespace meshrun::test {

struct TinyLayerImpl : torch::nn::Module {
  explicit TinyLayerImpl(int64_t hidden)
      : proj(register_module("proj", torch::nn::Linear(hidden, hidden))),
        scale(register_parameter("scale", torch::full({hidden}, 0.5))) {}
  // Computes in fp32 whatever the parameters' dtype, so that every dtype
  // layout gives the same numbers; gradients reach the parameters in their dtype.
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = x.to(torch::kFloat32);
    return h + torch::tanh(torch::nn::functional::linear(h, proj->weight.to(torch::kFloat32),
                                                         proj->bias.to(torch::kFloat32))) *
                   scale.to(torch::kFloat32);
  }
  torch::nn::Linear proj;
  torch::Tensor scale;
};
TORCH_MODULE(TinyLayer);

struct TinyInnerImpl : torch::nn::Module {
  TinyInnerImpl(int64_t vocab, int64_t hidden, int layer_count)
      : embed_tokens(register_module("embed_tokens", torch::nn::Embedding(vocab, hidden))),
        layers(register_module("layers", torch::nn::ModuleList())) {
    for (int i = 0; i < layer_count; ++i) layers->push_back(TinyLayer(hidden));
    norm = register_module("norm", std::make_shared<torch::nn::Module>());
    norm->register_parameter("weight", torch::ones({hidden}));
  }
  torch::nn::Embedding embed_tokens;
  torch::nn::ModuleList layers;
  std::shared_ptr<torch::nn::Module> norm;
};
TORCH_MODULE(TinyInner);

struct TinyUnitModelImpl : torch::nn::Module {
  TinyUnitModelImpl(int64_t vocab = 13, int64_t hidden = 8, int layer_count = 2)
      : model(register_module("model", TinyInner(vocab, hidden, layer_count))),
        lm_head(register_module("lm_head", torch::nn::Linear(torch::nn::LinearOptions(hidden, vocab).bias(false)))),
        layer_count_(layer_count) {}

  torch::Tensor forward(const torch::Tensor& ids) {
    auto unit = [&](int index, auto&& body) {
      if (hooks) hooks->before_unit(index);
      torch::Tensor out = body();
      return hooks ? hooks->after_unit(index, out) : out;
    };
    torch::Tensor h = unit(0, [&] { return model->embed_tokens(ids); });
    for (int i = 0; i < layer_count_; ++i)
      h = unit(i + 1, [&] { return model->layers[i]->as<TinyLayer>()->forward(h); });
    return unit(layer_count_ + 1, [&] {
      const torch::Tensor normed = h * model->norm->named_parameters()["weight"].to(torch::kFloat32);
      return torch::nn::functional::linear(normed, lm_head->weight.to(torch::kFloat32));
    });
  }

  std::vector<ParameterSpec> specs() const {
    const auto vocab = model->embed_tokens->weight.size(0), hidden = model->embed_tokens->weight.size(1);
    std::vector<ParameterSpec> specs{{"model.embed_tokens.weight", {vocab, hidden}, -1, 0, true}};
    for (int i = 0; i < layer_count_; ++i) {
      const std::string prefix = "model.layers." + std::to_string(i) + ".";
      specs.push_back({prefix + "proj.weight", {hidden, hidden}, -1, i + 1, true});
      specs.push_back({prefix + "proj.bias", {hidden}, -1, i + 1, false});
      specs.push_back({prefix + "scale", {hidden}, -1, i + 1, false});
    }
    specs.push_back({"model.norm.weight", {hidden}, -1, layer_count_ + 1, false});
    specs.push_back({"lm_head.weight", {vocab, hidden}, -1, layer_count_ + 1, true});
    return specs;
  }

  TinyInner model;
  torch::nn::Linear lm_head;
  ModelUnitHooks* hooks = nullptr;
  int layer_count_;
};
TORCH_MODULE(TinyUnitModel);

inline TrainableModel trainable(const TinyUnitModel& tiny) {
  TrainableModel model = TrainableModel::from_module(tiny.ptr(), tiny->specs(), tiny->layer_count_ + 2);
  TinyUnitModelImpl* impl = tiny.ptr().get();
  model.set_unit_hooks = [impl](ModelUnitHooks* hooks) { impl->hooks = hooks; };
  return model;
}

// The engine tests' model: vocabulary 13, hidden 8, two layers, seed 7, its
// parameters in `dtype`.
inline constexpr int64_t kTinyVocab = 13;
inline TinyUnitModel seeded_tiny_model(torch::Dtype dtype = torch::kFloat32) {
  torch::manual_seed(7);
  TinyUnitModel model(kTinyVocab, 8, 2);
  model->to(dtype);
  return model;
}

}  // namespace meshrun::test
