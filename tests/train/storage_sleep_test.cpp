// StorageSleep: storages freed while asleep and restored byte for byte,
// views kept valid; a training engine that sleeps between steps (every
// ZeRO stage, with offload) trains exactly like one that never sleeps.
#include "tests/dist/torch_doctest.hpp"

#include "meshrun/model/model.hpp"
#include "meshrun/train/storage_sleep.hpp"
#include "meshrun/train/train_engine.hpp"
#include "tests/model/model_fixtures.hpp"
#include "tests/train/tiny_unit_model.hpp"

namespace meshrun {
namespace {

using test::TinyUnitModel;

using test::kTinyVocab;
using test::seeded_tiny_model;

// Three optimizer steps of two micro-batches; sleeps and wakes between
// steps when `sleep` is set. Returns the losses, then the final weights.
std::pair<std::vector<double>, torch::Tensor> train(int stage, bool offload, bool sleep) {
  TinyUnitModel model = seeded_tiny_model();
  EngineOptions options;
  options.zero_stage = stage;
  options.offload = offload;
  options.adamw.weight_decay = 0.1;
  options.schedule = LrSchedule::make(LrScheduleKind::cosine, 0.05, 3, 0.34, 0.1);
  options.bucket_mb = 0.0005;  // several buckets
  TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
  StorageSleep sleeper;
  sleeper.add(engine.memory());
  std::vector<double> losses;
  for (int step = 0; step < 3; ++step) {
    for (int micro = 0; micro < 2; ++micro) {
      auto generator = torch::make_generator<at::CPUGeneratorImpl>(100 + 2 * step + micro);
      const torch::Tensor ids = torch::randint(kTinyVocab, {4, 5}, generator, torch::kInt64);
      const torch::Tensor labels = torch::randint(kTinyVocab, {4, 5}, generator, torch::kInt64);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(
          model->forward(ids).view({-1, kTinyVocab}), labels.view({-1}));
      losses.push_back(loss.item<double>());
      engine.backward(loss / 2, micro == 1);
    }
    engine.step();
    if (sleep) {
      sleeper.sleep();
      CHECK(sleeper.asleep());
      sleeper.wake();
    }
  }
  std::vector<torch::Tensor> pieces;
  for (const auto& [name, tensor] : engine.gather_full_parameters()) pieces.push_back(tensor.view({-1}));
  return {losses, torch::cat(pieces)};
}

}  // namespace

TEST_CASE("a sleeping storage holds no memory and wakes with the same bytes, views included") {
  torch::manual_seed(1);
  const torch::Tensor flat = torch::randn({100});
  const torch::Tensor view = flat.narrow(0, 10, 20).view({4, 5});
  const torch::Tensor expected = flat.clone();
  StorageSleep sleeper;
  sleeper.add(flat);
  sleeper.add(view);  // the same storage: registered once
  CHECK(sleeper.bytes() == 400);
  CHECK(sleeper.sleep() == 0);  // no device bytes: these live on the CPU
  CHECK(flat.storage().nbytes() == 0);
  CHECK(sleeper.bytes() == 400);
  CHECK(sleeper.sleep() == 0);  // no-op
  CHECK(StorageSleep::device_reserved_bytes(torch::kCPU) == 0);
  sleeper.wake();
  CHECK(flat.storage().nbytes() == 400);
  CHECK(torch::equal(flat, expected));
  CHECK(torch::equal(view, expected.narrow(0, 10, 20).view({4, 5})));
  CHECK_THROWS_AS([&] { sleeper.sleep(); sleeper.add(torch::zeros({2})); }(), std::logic_error);
}

TEST_CASE("before_sleep runs at each sleep, before the storages move, and not on a sleep that does nothing") {
  const torch::Tensor flat = torch::ones({10});
  StorageSleep sleeper;
  sleeper.add(flat);
  std::vector<size_t> seen;  // the storage's bytes when the hook ran
  sleeper.before_sleep([&] { seen.push_back(flat.storage().nbytes()); });
  sleeper.sleep();
  sleeper.sleep();  // asleep already: no-op
  sleeper.wake();
  sleeper.sleep();
  CHECK(seen == std::vector<size_t>{40, 40});
  sleeper.wake();
}

TEST_CASE("a LoRA engine's memory includes the frozen base: colocate sleep frees it and wakes it intact") {
  ModelOptions options;
  options.config = model_test::small_config();
  options.lora.rank = 4;
  options.lora.alpha = 8;
  options.lora.targets = {"q_proj", "v_proj"};
  torch::manual_seed(5);
  LlamaModel model(options);
  std::map<std::string, torch::Tensor> before;
  for (const auto& item : model->named_parameters()) before[item.key()] = item.value().clone();
  TrainEngine engine(TrainableModel::of(model), nullptr, nullptr, EngineOptions{});
  StorageSleep sleeper;
  sleeper.add(engine.memory());
  int64_t base_bytes = 0;
  for (const auto& item : model->named_parameters())
    if (!item.value().requires_grad()) base_bytes += item.value().numel() * 4;
  REQUIRE(base_bytes > 0);
  CHECK(sleeper.bytes() >= base_bytes);
  sleeper.sleep();
  for (const auto& item : model->named_parameters()) {
    CAPTURE(item.key());
    CHECK(item.value().storage().nbytes() == 0);
  }
  sleeper.wake();
  for (const auto& item : model->named_parameters()) {
    CAPTURE(item.key());
    CHECK(torch::equal(item.value(), before.at(item.key())));
  }
}

TEST_CASE("an engine that sleeps between steps trains exactly like one that never sleeps") {
  for (int stage : {0, 1, 2, 3}) {
    for (bool offload : {false, true}) {
      if (stage == 3 && offload) continue;
      CAPTURE(stage);
      CAPTURE(offload);
      const auto awake = train(stage, offload, false);
      const auto sleeping = train(stage, offload, true);
      CHECK(awake.first == sleeping.first);
      CHECK(torch::equal(awake.second, sleeping.second));
    }
  }
}

}  // namespace meshrun
