// The engine's multi-turn episodes (Generator with a TurnHandler): a
// scripted handler answers each turn with fixed observation tokens; the
// tokens, masks and log-probs equal the recomputing reference's; each turn
// is bounded by max_new_tokens and the episode by max_total_tokens;
// scheduling (max_batch, a tight pool with preemption) changes no token;
// a failing handler leaves every block free.
#include "tests/dist/torch_doctest.hpp"

#include <stdexcept>

#include "meshrun/model/model.hpp"
#include "meshrun/rollout/generation.hpp"

using namespace meshrun;

namespace {

LlamaModel episode_model() {
  ModelOptions options;
  options.config.hidden = 32;
  options.config.layers = 2;
  options.config.heads = 4;
  options.config.kv_heads = 2;
  options.config.intermediate = 48;
  options.config.vocab = 48;
  options.config.max_position = 256;
  options.config.initializer_range = 0.3;
  torch::manual_seed(31);
  return LlamaModel(options);
}

// Request r's episode: up to `turns` model turns; after turn k the
// observation {40 + r % 4, 30 + k, 31} (k-th observation), unless it would
// not fit, which ends the episode.
struct ScriptedTurns : TurnHandler {
  int turns = 3;
  std::vector<std::vector<int64_t>> turn_lengths;  // per request
  std::vector<std::vector<int64_t>> rooms;
  int64_t fail_on_call = -1;  // throw at this call (0-based)
  int64_t calls = 0;

  TurnEnd end_turn(size_t request, const GeneratedSample& sample, int64_t turn_begin, int64_t room) override {
    if (calls++ == fail_on_call) throw std::runtime_error("the scripted environment fails");
    if (turn_lengths.size() <= request) turn_lengths.resize(request + 1), rooms.resize(request + 1);
    turn_lengths[request].push_back(static_cast<int64_t>(sample.response.size()) - turn_begin);
    rooms[request].push_back(room);
    TurnEnd end;
    if (sample.turns >= turns) return end;
    std::vector<int32_t> observation = {static_cast<int32_t>(40 + request % 4), 30 + sample.turns, 31};
    if (static_cast<int64_t>(observation.size()) >= room) return end;
    end.finished = false;
    end.observation = observation;
    return end;
  }
};

const std::vector<std::vector<int32_t>> kEpisodePrompts = {{5, 6, 7}, {8, 9, 10, 11, 12, 13, 14}, {1}, {2, 3}, {20, 21, 22, 23}};

SamplingOptions episode_options(double temperature) {
  SamplingOptions options;
  options.temperature = temperature;
  options.top_k = 30;
  options.max_new_tokens = 6;
  options.seed = 17;
  options.stop_ids = {0, 1};  // some turns end early
  return options;
}

void check_episode_shape(const GeneratedSample& sample, const std::vector<int64_t>& lengths, int64_t max_new) {
  REQUIRE(sample.policy_mask.size() == sample.response.size());
  REQUIRE(sample.log_probs.size() == sample.response.size());
  CHECK(sample.turns == static_cast<int32_t>(lengths.size()));
  // Turns of policy tokens, each followed (but the last) by a 3-token observation.
  size_t at = 0;
  for (size_t turn = 0; turn < lengths.size(); ++turn) {
    CHECK(lengths[turn] >= 1);
    CHECK(lengths[turn] <= max_new);
    for (int64_t t = 0; t < lengths[turn]; ++t, ++at) CHECK(sample.policy_mask[at] == 1);
    if (turn + 1 < lengths.size()) {
      for (int t = 0; t < 3; ++t, ++at) {
        CHECK(sample.policy_mask[at] == 0);
        CHECK(sample.log_probs[at] == 0.0f);
      }
      CHECK(sample.response[at - 2] == 30 + static_cast<int32_t>(turn) + 1);
    }
  }
  CHECK(at == sample.response.size());
}

}  // namespace

TEST_CASE("episodes: the engine's turns and observations equal the recomputing reference, masks in place") {
  for (double temperature : {0.0, 1.0}) {
    CAPTURE(temperature);
    Generator generator(episode_model(), nullptr, 8, 60);
    ScriptedTurns cached_turns, recomputed_turns;
    const auto cached = generator.generate(kEpisodePrompts, episode_options(temperature), true, &cached_turns);
    const auto recomputed = generator.generate(kEpisodePrompts, episode_options(temperature), false, &recomputed_turns);
    REQUIRE(cached.size() == kEpisodePrompts.size());
    for (size_t i = 0; i < kEpisodePrompts.size(); ++i) {
      CAPTURE(i);
      CHECK(cached[i].response == recomputed[i].response);
      CHECK(cached[i].policy_mask == recomputed[i].policy_mask);
      CHECK(cached[i].turns == recomputed[i].turns);
      REQUIRE(cached[i].log_probs.size() == recomputed[i].log_probs.size());
      for (size_t t = 0; t < cached[i].log_probs.size(); ++t)
        CHECK(cached[i].log_probs[t] == doctest::Approx(recomputed[i].log_probs[t]).epsilon(1e-4));
      check_episode_shape(cached[i], cached_turns.turn_lengths[i], 6);
      CHECK(cached_turns.turn_lengths[i] == recomputed_turns.turn_lengths[i]);
    }
    CHECK(generator.kv_pool().free_blocks() == generator.kv_pool().total_blocks());
  }
}

TEST_CASE("episodes: max_batch, block size and a tight pool with preemption change no token") {
  SamplingOptions options = episode_options(1.0);
  std::vector<std::vector<int32_t>> prompts;
  for (int copy = 0; copy < 3; ++copy)
    for (const auto& prompt : kEpisodePrompts) prompts.push_back(prompt);
  Generator roomy(episode_model(), nullptr, 64, 60);
  ScriptedTurns reference_turns;
  const auto reference = roomy.generate(prompts, options, true, &reference_turns);
  for (int64_t max_batch : {1, 4}) {
    for (int64_t kv_tokens : {0, 64}) {
      CAPTURE(max_batch);
      CAPTURE(kv_tokens);
      Generator engine(episode_model(), nullptr, max_batch, 60, kv_tokens, 4);
      ScriptedTurns turns;
      const auto samples = engine.generate(prompts, options, true, &turns);
      for (size_t i = 0; i < prompts.size(); ++i) {
        CHECK(samples[i].response == reference[i].response);
        CHECK(samples[i].policy_mask == reference[i].policy_mask);
      }
      CHECK(engine.kv_pool().free_blocks() == engine.kv_pool().total_blocks());
      if (kv_tokens > 0 && max_batch == 4) CHECK(engine.stats().preemptions > 0);
    }
  }
}

TEST_CASE("episodes: max_total_tokens ends an episode, and the handler is told the room left") {
  SamplingOptions options = episode_options(1.0);
  options.stop_ids.clear();  // every turn runs its 6 tokens
  Generator generator(episode_model(), nullptr, 4, 20);
  ScriptedTurns turns;
  turns.turns = 10;
  const std::vector<std::vector<int32_t>> prompts = {{5, 6, 7}};
  const auto samples = generator.generate(prompts, options, true, &turns);
  // 3 + 6 = 9, + 3 = 12, + 6 = 18, + 3 would leave one: 21 > 20, so the
  // second turn is cut at 20 - 12 = 8 → it runs its 6 (room 2), and the
  // observation of 3 does not fit: the episode ends after two turns.
  REQUIRE(samples.size() == 1);
  CHECK(samples[0].turns == 2);
  CHECK(turns.turn_lengths[0] == std::vector<int64_t>{6, 6});
  CHECK(turns.rooms[0] == std::vector<int64_t>{11, 2});
  CHECK(samples[0].prompt.size() + samples[0].response.size() == 18);

  // A turn the sequence's limit cuts: room 0 reaches the handler.
  Generator tight(episode_model(), nullptr, 4, 14);
  ScriptedTurns cut;
  cut.turns = 10;
  const auto short_samples = tight.generate(prompts, options, true, &cut);
  CHECK(cut.turn_lengths[0] == std::vector<int64_t>{6, 2});
  CHECK(cut.rooms[0] == std::vector<int64_t>{5, 0});
  CHECK(short_samples[0].prompt.size() + short_samples[0].response.size() == 14);
}

TEST_CASE("episodes: a failing handler, an observation without room or outside the vocabulary leaves every block free") {
  SamplingOptions options = episode_options(1.0);
  Generator generator(episode_model(), nullptr, 4, 60, 0, 4);
  ScriptedTurns failing;
  failing.fail_on_call = 4;
  CHECK_THROWS_WITH_AS(generator.generate(kEpisodePrompts, options, true, &failing), "the scripted environment fails",
                       std::runtime_error);
  CHECK(generator.kv_pool().free_blocks() == generator.kv_pool().total_blocks());

  struct Overlong : TurnHandler {
    TurnEnd end_turn(size_t, const GeneratedSample&, int64_t, int64_t room) override {
      return TurnEnd{false, std::vector<int32_t>(static_cast<size_t>(room), 3)};
    }
  } overlong;
  CHECK_THROWS_AS(generator.generate(kEpisodePrompts, options, true, &overlong), std::logic_error);
  CHECK(generator.kv_pool().free_blocks() == generator.kv_pool().total_blocks());
  // An observation id outside the vocabulary (checked on the host: a GPU's
  // forward does not read ids back).
  struct OutOfVocabulary : TurnHandler {
    TurnEnd end_turn(size_t, const GeneratedSample&, int64_t, int64_t) override { return TurnEnd{false, {3, 1 << 20}}; }
  } out_of_vocabulary;
  CHECK_THROWS_WITH_AS(generator.generate(kEpisodePrompts, options, true, &out_of_vocabulary),
                       doctest::Contains("observation holds token id 1048576"), ModelInputError);
  CHECK(generator.kv_pool().free_blocks() == generator.kv_pool().total_blocks());

  // The engine still works afterwards.
  ScriptedTurns turns;
  const auto samples = generator.generate(kEpisodePrompts, options, true, &turns);
  CHECK(samples.size() == kEpisodePrompts.size());
}

TEST_CASE("episodes: a pool that cannot hold a whole episode is refused before anything runs") {
  Generator generator(episode_model(), nullptr, 4, 60, 32, 4);
  ScriptedTurns turns;
  CHECK_THROWS_AS(generator.generate(kEpisodePrompts, episode_options(1.0), true, &turns), std::logic_error);
  CHECK(turns.calls == 0);
}
