// The training engine in one process (dp = tp = 1) on a small model that
// follows model.hpp's contract: the same updates as plain LibTorch (AdamW
// groups, clip_grad_norm_, the schedule), every ZeRO stage and offload
// giving the same weights, accumulation, bf16 and fp16 (loss scaling and
// skipped steps), ZeRO-3's released parameters, state export and import.
// The multi-process equivalence runs are in multiprocess_train_test.cpp.
#include "tests/dist/torch_doctest.hpp"

#include <cmath>
#include <set>
#include <limits>

#include "meshrun/ckpt/checkpoint.hpp"
#include "meshrun/error.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/train/train_engine.hpp"
#include "tests/train/tiny_unit_model.hpp"

namespace meshrun {
namespace {

using test::TinyUnitModel;

using test::kTinyVocab;
using test::seeded_tiny_model;

struct Batch {
  torch::Tensor ids, labels;
};

Batch batch(int step, int rows = 4) {
  auto generator = torch::make_generator<at::CPUGeneratorImpl>(100 + step);
  Batch b;
  b.ids = torch::randint(kTinyVocab, {rows, 5}, generator, torch::kInt64);
  b.labels = torch::randint(kTinyVocab, {rows, 5}, generator, torch::kInt64);
  return b;
}

torch::Tensor loss_of(TinyUnitModel& model, const Batch& b) {
  return torch::nn::functional::cross_entropy(model->forward(b.ids).to(torch::kFloat32).view({-1, kTinyVocab}),
                                              b.labels.view({-1}));
}

EngineOptions fp32_options(int stage) {
  EngineOptions options;
  options.zero_stage = stage;
  options.adamw.weight_decay = 0.1;
  options.adamw.beta2 = 0.99;
  options.schedule = LrSchedule::make(LrScheduleKind::cosine, 0.05, 6, 0.34, 0.1);
  options.max_norm = 0.5;  // small enough to clip
  options.bucket_mb = 0.0005;  // several buckets
  return options;
}

torch::Tensor flat_weights(TinyUnitModel& model) {
  std::vector<torch::Tensor> pieces;
  for (const auto& parameter : model->parameters()) pieces.push_back(parameter.detach().to(torch::kFloat32).view({-1}));
  return torch::cat(pieces);
}

torch::Tensor flat_weights(const NamedTensors& tensors, TinyUnitModel& names_from) {
  std::vector<torch::Tensor> pieces;
  for (const auto& item : names_from->named_parameters()) pieces.push_back(tensors.at(item.key()).view({-1}));
  return torch::cat(pieces);
}

// Trains `steps` steps of `micro` micro-batches; returns the losses.
std::vector<double> train(TrainEngine& engine, TinyUnitModel& model, int steps, int micro = 1,
                          std::vector<StepResult>* results = nullptr) {
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    double total = 0;
    for (int m = 0; m < micro; ++m) {
      const Batch whole = batch(step);
      const int64_t rows = whole.ids.size(0) / micro;
      const Batch part{whole.ids.narrow(0, m * rows, rows), whole.labels.narrow(0, m * rows, rows)};
      torch::Tensor loss = loss_of(model, part) / micro;
      total += loss.item<double>();
      engine.backward(loss, m + 1 == micro);
    }
    const StepResult result = engine.step();
    if (results) results->push_back(result);
    losses.push_back(total);
  }
  return losses;
}

TEST_CASE("fp32 at dp 1 makes the same updates as LibTorch's AdamW with clip_grad_norm_") {
  auto reference_model = seeded_tiny_model();
  const auto options = fp32_options(0);
  std::vector<torch::Tensor> decayed, plain;
  for (const auto& spec : reference_model->specs())
    (spec.decays ? decayed : plain).push_back(reference_model->named_parameters()[spec.name]);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto adamw = [&](double decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(0.05).betas({0.9, 0.99}).eps(1e-8).weight_decay(decay));
  };
  groups.emplace_back(decayed, adamw(0.1));
  groups.emplace_back(plain, adamw(0.0));
  torch::optim::AdamW optimizer(std::move(groups), torch::optim::AdamWOptions(0.05));
  std::vector<double> reference_losses, reference_norms;
  for (int step = 0; step < 4; ++step) {
    optimizer.zero_grad();
    auto loss = loss_of(reference_model, batch(step));
    reference_losses.push_back(loss.item<double>());
    loss.backward();
    reference_norms.push_back(torch::nn::utils::clip_grad_norm_(reference_model->parameters(), 0.5));
    for (auto& group : optimizer.param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(options.schedule.lr(step));
    optimizer.step();
  }

  auto model = seeded_tiny_model();
  TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
  std::vector<StepResult> results;
  const auto losses = train(engine, model, 4, 1, &results);
  for (int step = 0; step < 4; ++step) {
    CHECK(losses[step] == doctest::Approx(reference_losses[step]).epsilon(1e-6));
    CHECK(results[step].grad_norm == doctest::Approx(reference_norms[step]).epsilon(1e-5));
    CHECK(results[step].lr == doctest::Approx(options.schedule.lr(step)));
    CHECK_FALSE(results[step].skipped);
  }
  CHECK(reference_norms[0] > 0.5);  // clipping took part
  CHECK(engine.steps_taken() == 4);
  CHECK(torch::allclose(flat_weights(model), flat_weights(reference_model), 1e-5, 1e-6));
  CHECK(torch::allclose(flat_weights(engine.gather_full_parameters(), model), flat_weights(model)));
}

TEST_CASE("every ZeRO stage, offload and accumulation give the same weights at dp 1") {
  auto base_model = seeded_tiny_model();
  TrainEngine base(test::trainable(base_model), nullptr, nullptr, fp32_options(0));
  const auto base_losses = train(base, base_model, 3);
  const auto expected = flat_weights(base_model);
  for (int stage = 0; stage <= 3; ++stage)
    for (const bool offload : {false, true})
      for (const int micro : {1, 2}) {
        CAPTURE(stage);
        CAPTURE(offload);
        CAPTURE(micro);
        auto model = seeded_tiny_model();
        auto options = fp32_options(stage);
        options.offload = offload;
        TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
        const auto losses = train(engine, model, 3, micro);
        for (int step = 0; step < 3; ++step) CHECK(losses[step] == doctest::Approx(base_losses[step]).epsilon(1e-5));
        const auto weights = flat_weights(engine.gather_full_parameters(), model);
        CHECK(torch::allclose(weights, expected, 1e-5, 1e-6));
        if (stage == 3) {
          // Outside forward/backward the parameters hold no memory.
          for (const auto& parameter : model->parameters()) CHECK(parameter.storage().nbytes() == 0);
          torch::NoGradGuard no_grad;
          engine.eval();
          CHECK(loss_of(model, batch(9)).item<double>() == doctest::Approx(loss_of(base_model, batch(9)).item<double>())
                                                                .epsilon(1e-5));
          engine.train();
        } else {
          CHECK(torch::allclose(flat_weights(model), expected, 1e-5, 1e-6));
        }
      }
}

TEST_CASE("bf16 trains on fp32 master weights; the model holds their rounding") {
  auto model = seeded_tiny_model(torch::kBFloat16);
  auto options = fp32_options(1);
  options.dtype = torch::kBFloat16;
  TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
  const auto losses = train(engine, model, 6);
  CHECK(losses.back() < losses.front());
  const auto master = flat_weights(engine.gather_full_parameters(), model);
  CHECK((master.scalar_type() == torch::kFloat32));
  CHECK(torch::equal(master.to(torch::kBFloat16).to(torch::kFloat32), flat_weights(model)));
  CHECK_FALSE(torch::equal(master, flat_weights(model)));  // the master keeps what bf16 cannot
}

// Bytes of the distinct storages among `tensors`.
int64_t storage_bytes(const std::vector<torch::Tensor>& tensors) {
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& tensor : tensors)
    if (seen.insert(tensor.storage().data()).second) bytes += static_cast<int64_t>(tensor.storage().nbytes());
  return bytes;
}

TEST_CASE("bf16 at dp 1 keeps no fp32 copy of its gradient: 16 bytes a parameter, the same update in any chunks") {
  // Offloading keeps the fp32 copy (the gradient goes to host memory):
  // here on the CPU it is the reference for the chunked step, bit for bit.
  const auto run = [](int stage, std::int64_t chunk, bool offload, bool device_decides) {
    auto model = seeded_tiny_model(torch::kBFloat16);
    auto options = fp32_options(stage);
    options.dtype = torch::kBFloat16;
    options.upcast_chunk_elements = chunk;
    options.offload = offload;
    options.device_decides = device_decides;
    TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
    std::vector<StepResult> results;
    train(engine, model, 4, 2, &results);
    for (auto& result : results) result.read();
    return std::tuple{flat_weights(engine.gather_full_parameters(), model), results, storage_bytes(engine.memory()),
                      model};
  };
  const auto [reference, reference_results, reference_bytes, reference_model] = run(1, 1 << 20, true, false);
  int64_t numel = 0;
  for (const auto& parameter : reference_model->parameters()) numel += parameter.numel();
  for (const int stage : {0, 1, 2})
    for (const std::int64_t chunk : {std::int64_t{1} << 20, std::int64_t{7}, std::int64_t{1}})
      for (const bool device_decides : {false, true}) {
        CAPTURE(stage);
        CAPTURE(chunk);
        CAPTURE(device_decides);
        const auto [weights, results, bytes, model] = run(stage, chunk, false, device_decides);
        CHECK(torch::equal(weights, reference));
        for (size_t step = 0; step < results.size(); ++step) {
          CHECK(results[step].grad_norm == reference_results[step].grad_norm);
          CHECK(results[step].skipped == reference_results[step].skipped);
        }
        // bf16 weights and gradients, fp32 master and moments, one scratch
        // chunk (as large as the largest bucket at most); the fp32 gradient
        // (4 bytes a parameter more) is gone.
        CHECK(bytes <= 16 * numel + 4 * std::min<int64_t>(chunk, numel));
        CHECK(bytes >= 16 * numel);
      }
}

TEST_CASE("fp16 scales the loss, skips a step whose gradients overflow and lowers the scale") {
  auto model = seeded_tiny_model(torch::kFloat16);
  auto options = fp32_options(2);
  options.dtype = torch::kFloat16;
  options.loss_scaler.initial_scale = 1024;
  TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
  CHECK(engine.loss_scale() == 1024);
  const auto before = flat_weights(engine.gather_full_parameters(), model);
  // 1e4 * 1024 overflows fp16 (max 65504) in the gradients.
  engine.backward(loss_of(model, batch(0)) * 1e4f, true);
  const StepResult skipped = engine.step();
  CHECK(skipped.skipped);
  CHECK_FALSE(std::isfinite(skipped.grad_norm));
  CHECK(skipped.loss_scale == 1024);
  CHECK(engine.loss_scale() == 512);
  CHECK(engine.steps_taken() == 0);
  CHECK(torch::equal(flat_weights(engine.gather_full_parameters(), model), before));

  engine.backward(loss_of(model, batch(0)), true);
  const StepResult taken = engine.step();
  CHECK_FALSE(taken.skipped);
  CHECK(std::isfinite(taken.grad_norm));
  CHECK(taken.lr == doctest::Approx(options.schedule.lr(0)));  // the skipped step used no rate
  CHECK(engine.steps_taken() == 1);
  CHECK_FALSE(torch::equal(flat_weights(engine.gather_full_parameters(), model), before));
}

// One backward and step whose gradients are all inf/nan (finite = false) or
// those of an ordinary batch.
StepResult step_with(TrainEngine& engine, TinyUnitModel& model, bool finite) {
  torch::Tensor loss = loss_of(model, batch(0));
  engine.backward(finite ? loss : loss * std::numeric_limits<float>::infinity(), true);
  return engine.step();
}

TEST_CASE("fp32: max_skipped_steps non-finite steps in a row stop the run, a finite step starts the count over") {
  auto model = seeded_tiny_model();
  auto options = fp32_options(1);
  CHECK(options.max_skipped_steps == 10);
  options.max_skipped_steps = 3;
  TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
  CHECK(step_with(engine, model, false).skipped);
  CHECK(step_with(engine, model, false).skipped);
  CHECK_FALSE(step_with(engine, model, true).skipped);
  CHECK(step_with(engine, model, false).skipped);
  CHECK(step_with(engine, model, false).skipped);
  const auto before = flat_weights(engine.gather_full_parameters(), model);
  try {
    step_with(engine, model, false);
    FAIL("the third non-finite step in a row must stop the run");
  } catch (const NonFiniteGradientsError& error) {
    CHECK(error.kind() == ErrorKind::model);
    const std::string message = error.what();
    CHECK(message.find("non-finite in 3 optimizer steps in a row (last grad norm ") != std::string::npos);
    CHECK((message.find("grad norm nan") != std::string::npos || message.find("grad norm inf") != std::string::npos));
    CHECK(message.find("stopped after optimizer step 1 by train.max_skipped_steps = 3") != std::string::npos);
    CHECK(message.find("learning rate") != std::string::npos);
    CHECK(message.find("reward_clip") != std::string::npos);
    CHECK(message.find("loss scale") == std::string::npos);  // fp32 has none
    CHECK(describe_failure(error, nullptr).rfind("model error: the gradients were non-finite", 0) == 0);
  }
  CHECK(engine.steps_taken() == 1);
  CHECK(torch::equal(flat_weights(engine.gather_full_parameters(), model), before));
  // The gradients were cleared before the throw: the engine is usable.
  CHECK_FALSE(step_with(engine, model, true).skipped);
}

TEST_CASE("fp16: skips that still lower the loss scale do not count, skips at the minimum scale do") {
  auto model = seeded_tiny_model(torch::kFloat16);
  auto options = fp32_options(0);
  options.dtype = torch::kFloat16;
  options.loss_scaler.initial_scale = 4;
  options.loss_scaler.min_scale = 1;
  options.max_skipped_steps = 2;
  TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
  CHECK(step_with(engine, model, false).skipped);  // 4 -> 2
  CHECK(step_with(engine, model, false).skipped);  // 2 -> 1
  CHECK(engine.loss_scale() == 1);
  CHECK(step_with(engine, model, false).skipped);  // at the minimum: 1 of 2
  CHECK_THROWS_WITH_AS(step_with(engine, model, false),
                       doctest::Contains("non-finite in 2 optimizer steps in a row (last grad norm"),
                       NonFiniteGradientsError);
  CHECK_THROWS_WITH_AS(step_with(engine, model, false), doctest::Contains("at the fp16 loss scale's minimum 1)"),
                       NonFiniteGradientsError);
  CHECK(engine.steps_taken() == 0);
}

TEST_CASE("max_skipped_steps = -1 never stops; other values below 1 are refused") {
  auto model = seeded_tiny_model();
  auto options = fp32_options(0);
  options.max_skipped_steps = -1;
  TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
  for (int step = 0; step < 15; ++step) CHECK(step_with(engine, model, false).skipped);
  CHECK(engine.steps_taken() == 0);
  options.max_skipped_steps = 0;
  CHECK_THROWS_WITH_AS(TrainEngine(test::trainable(seeded_tiny_model()), nullptr, nullptr, options),
                       doctest::Contains("max_skipped_steps must be at least 1, or -1 (never stop), got 0"),
                       ConfigError);
}

TEST_CASE("state: a ZeRO-3 run continues under ZeRO-0 from its full state, and local state round-trips") {
  auto first_model = seeded_tiny_model();
  TrainEngine first(test::trainable(first_model), nullptr, nullptr, fp32_options(3));
  train(first, first_model, 2);
  const FullTrainingState state = first.gather_full_state();
  CHECK(state.step == 2);
  CHECK(state.exp_avg.size() == first_model->specs().size());
  const auto saved_local = first.local_state();

  auto second_model = seeded_tiny_model();
  TrainEngine second(test::trainable(second_model), nullptr, nullptr, fp32_options(0));
  second.load_full_state(state);
  CHECK(second.steps_taken() == 2);
  CHECK(torch::allclose(flat_weights(second_model), flat_weights(state.parameters, second_model)));

  // Both continue identically.
  auto step_both = [&](int step) {
    for (auto* pair : {&first, &second}) {
      auto& model = pair == &first ? first_model : second_model;
      pair->backward(loss_of(model, batch(step)), true);
      pair->step();
    }
  };
  step_both(2);
  CHECK(torch::allclose(flat_weights(first.gather_full_parameters(), first_model),
                        flat_weights(second.gather_full_parameters(), second_model), 1e-6, 1e-7));

  // Local state: restoring the saved shard takes the ZeRO-3 engine back.
  first.load_local_state(saved_local);
  CHECK(first.steps_taken() == 2);
  CHECK(torch::equal(flat_weights(first.gather_full_parameters(), first_model),
                     flat_weights(state.parameters, first_model)));
  CHECK_THROWS_WITH_AS(second.load_local_state(saved_local), doctest::Contains("another layout"),
                       CheckpointError);
  FullTrainingState broken = state;
  broken.parameters["lm_head.weight"] = torch::zeros({2, 2});
  CHECK_THROWS_WITH_AS(second.load_full_state(broken), doctest::Contains("lm_head.weight"), CheckpointError);
}

TEST_CASE("the engine refuses misuse with a message") {
  auto model = seeded_tiny_model();
  TrainEngine engine(test::trainable(model), nullptr, nullptr, fp32_options(0));
  CHECK_THROWS_WITH_AS(engine.step(), doctest::Contains("backward"), std::logic_error);
  CHECK_THROWS_WITH_AS(engine.forward(ModelInputs{}), doctest::Contains("LlamaModel"), std::logic_error);
  engine.backward(loss_of(model, batch(0)), true);
  CHECK_THROWS_AS(engine.backward(loss_of(model, batch(0)), true), std::logic_error);
  engine.step();

  auto options = fp32_options(0);
  options.dtype = torch::kBFloat16;
  CHECK_THROWS_WITH_AS(TrainEngine(test::trainable(seeded_tiny_model()), nullptr, nullptr, options),
                       doctest::Contains("model.embed_tokens.weight is Float"), std::logic_error);
  auto wrong = test::trainable(seeded_tiny_model());
  wrong.specs[1].full_shape = {3, 3};
  CHECK_THROWS_WITH_AS(TrainEngine(std::move(wrong), nullptr, nullptr, fp32_options(0)),
                       doctest::Contains("model.layers.0.proj.weight has shape [8, 8]"), std::logic_error);
  auto specs = seeded_tiny_model()->specs();
  specs.pop_back();
  CHECK_THROWS_WITH_AS(TrainableModel::from_module(seeded_tiny_model().ptr(), specs, 4), doctest::Contains("specs"),
                       std::logic_error);
}

TEST_CASE("options come from the role's resolved plan") {
  RolePlan role;
  role.trained = true;
  role.zero_stage = 2;
  role.dtype = Precision::fp16;
  role.offload = true;
  role.gradient_checkpointing = true;
  role.optimizer = {.learning_rate = 2e-4,
                    .lr_scheduler = LrScheduleKind::linear,
                    .warmup_ratio = 0.1,
                    .min_lr_ratio = 0.0,
                    .weight_decay = 0.01,
                    .adam_beta1 = 0.9,
                    .adam_beta2 = 0.999,
                    .adam_eps = 1e-8,
                    .max_norm = 0.0,
                    .bucket_mb = 4,
                    .max_skipped_steps = 5};
  const auto options = EngineOptions::from_plan(role, 20);
  CHECK(options.zero_stage == 2);
  CHECK((options.dtype == torch::kFloat16));
  CHECK((options.schedule.kind == LrScheduleKind::linear));
  CHECK(options.schedule.warmup_steps == 2);
  CHECK(options.schedule.lr(1) == doctest::Approx(2e-4));
  CHECK(options.adamw.beta2 == 0.999);
  CHECK(options.adamw.weight_decay == 0.01);
  CHECK(options.offload);
  CHECK(options.gradient_checkpointing);
  CHECK(options.bucket_mb == 4);
  CHECK(options.max_skipped_steps == 5);
  role.optimizer.max_skipped_steps = -1;
  CHECK(EngineOptions::from_plan(role, 20).max_skipped_steps == -1);
  role.optimizer.max_skipped_steps = -3;
  CHECK_THROWS_WITH_AS(EngineOptions::from_plan(role, 20), doctest::Contains("train.max_skipped_steps"),
                       ConfigError);
  try {
    EngineOptions::from_plan(role, 20);
  } catch (const ConfigError& error) {
    CHECK(error.recipe_key() == "train.max_skipped_steps");
    CHECK(error.rule() == "schema.range");
  }
  // A dtype named outside a recipe (meshrun generate --dtype) is checked
  // where it is read.
  CHECK_THROWS_WITH_AS(dtype_from_recipe_name("fp8"), doctest::Contains("'fp8'"), ConfigError);
  CHECK((torch_dtype_of(Precision::bf16) == torch::kBFloat16));
}

}  // namespace
}  // namespace meshrun

namespace meshrun {
namespace {

// A step of one of two engines fed alike: finite, or all inf (`finite` false).
StepResult step_alike(TrainEngine& engine, TinyUnitModel& model, int step, bool finite) {
  torch::Tensor loss = loss_of(model, batch(step % 7));
  engine.backward(finite ? loss : loss * std::numeric_limits<float>::infinity(), true);
  return engine.step();
}

}  // namespace

TEST_CASE("the device-decided step (run on the CPU) makes the host's updates bit for bit: clipping, skips, fp16 scale, "
          "the rate window refilled") {
  CHECK_FALSE(EngineOptions().device_decides.has_value());  // unset: off the CPU only
  for (const torch::Dtype dtype : {torch::kFloat32, torch::kFloat16}) {
    CAPTURE(dtype);
    auto host_model = seeded_tiny_model(dtype), device_model = seeded_tiny_model(dtype);
    auto options = fp32_options(1);
    options.dtype = dtype;
    options.schedule = LrSchedule::make(LrScheduleKind::cosine, 0.01, 300, 0.05, 0.1);
    options.loss_scaler.initial_scale = 64;
    options.loss_scaler.growth_interval = 5;  // the scale grows and backs off along the way
    options.max_skipped_steps = -1;
    options.device_decides = false;
    TrainEngine host(test::trainable(host_model), nullptr, nullptr, options);
    options.device_decides = true;
    TrainEngine device(test::trainable(device_model), nullptr, nullptr, options);
    int skipped = 0;
    for (int step = 0; step < 270; ++step) {  // past one window of 256 rates
      const bool finite = step % 23 != 11;
      const StepResult want = step_alike(host, host_model, step, finite);
      StepResult got = step_alike(device, device_model, step, finite);
      REQUIRE(got.pending());
      got.read();
      CHECK_FALSE(got.pending());
      CAPTURE(step);
      CHECK(got.skipped == want.skipped);
      CHECK(got.step == want.step);
      CHECK(got.loss_scale == want.loss_scale);
      if (!want.skipped) {
        // Within an ulp: LibTorch divides by a one-element CPU tensor through
        // its reciprocal (the weights below are equal to the last bit).
        CHECK(std::abs(got.grad_norm - want.grad_norm) <= 4e-16 * want.grad_norm);
        CHECK(got.lr == want.lr);
      }
      skipped += want.skipped ? 1 : 0;
    }
    CHECK(skipped >= 10);
    CHECK(device.steps_taken() == host.steps_taken());
    CHECK(device.loss_scale() == host.loss_scale());
    CHECK(torch::equal(flat_weights(device.gather_full_parameters(), device_model),
                       flat_weights(host.gather_full_parameters(), host_model)));
    // Its counters travel with the local state as the host's do.
    const NamedTensors state = device.local_state();
    CHECK(state.at("step").item<int64_t>() == host.steps_taken());
    CHECK(state.at("loss_scale").item<double>() == host.loss_scale());
  }
}

TEST_CASE("the device-decided step: read() throws at max_skipped_steps skips in a row; a restored state carries on") {
  auto model = seeded_tiny_model();
  auto options = fp32_options(0);
  options.max_skipped_steps = 3;
  options.device_decides = true;
  TrainEngine engine(test::trainable(model), nullptr, nullptr, options);
  CHECK_FALSE(step_alike(engine, model, 0, true).read().skipped);
  CHECK(step_alike(engine, model, 1, false).read().skipped);
  CHECK(step_alike(engine, model, 2, false).read().skipped);
  StepResult third = step_alike(engine, model, 3, false);
  CHECK_THROWS_WITH_AS(third.read(), doctest::Contains("non-finite in 3 optimizer steps in a row"),
                       NonFiniteGradientsError);
  CHECK(engine.steps_taken() == 1);

  // A state saved here and loaded into a fresh device-decided engine: the
  // same next update as the first engine's.
  const NamedTensors saved = engine.local_state();
  auto other_model = seeded_tiny_model();
  TrainEngine other(test::trainable(other_model), nullptr, nullptr, options);
  other.load_local_state(saved);
  CHECK(other.steps_taken() == 1);
  const StepResult a = step_alike(engine, model, 4, true), b = step_alike(other, other_model, 4, true);
  StepResult ra = a, rb = b;
  CHECK(ra.read().step == 2);
  CHECK(rb.read().step == 2);
  CHECK(ra.lr == rb.lr);
  CHECK(torch::equal(flat_weights(engine.gather_full_parameters(), model),
                     flat_weights(other.gather_full_parameters(), other_model)));
}

}  // namespace meshrun
