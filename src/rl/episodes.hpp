// Multi-turn episodes, the Rollouts stage's part of [env]: the TurnHandler
// an engine calls at the end of each model turn. It runs the environment's
// step on the turn's reply (its text without special tokens), adds the
// reward, and decides whether the episode goes on: done, no observation,
// max_turns or the episode's token limit end it; otherwise the observation,
// cut to max_observation_tokens, is appended as tokens. Token in, token
// out: the engine's own ids are never re-tokenised. With chat prompts the
// observation's tokens are the chat template's delta: what rendering the
// conversation with the observation (as observation_role) and the
// generation prompt adds to rendering it without, preceded by what the
// template writes after the model's reply that the model did not (e.g. the
// newline after its end-of-turn token), so that the episode's ids equal a
// full render's. Internal to src/rl.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "meshrun/data/prompts.hpp"
#include "meshrun/hooks/env.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/rl/trajectory.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"

namespace meshrun::ppo_detail {

class Episodes final : public TurnHandler {
 public:
  // One episode per request of the engine's generate() call.
  struct Start {
    const Prompt* prompt = nullptr;
    int64_t index = 1;   // 1-based row in the step's samples
    int64_t sample = 1;  // 1-based sample of its prompt
  };
  // Calls reset for every episode (a HookError names the one that failed).
  Episodes(EnvScript& env, const Tokenizer& tokenizer, const EnvPlan& plan, const std::vector<Start>& starts);

  TurnEnd end_turn(size_t request, const GeneratedSample& sample, int64_t turn_begin, int64_t room) override;

  const std::vector<EpisodeRecord>& records() const { return records_; }
  // The environment's calls (reset and step) and the seconds they took.
  int64_t env_calls() const { return calls_; }
  double env_seconds() const { return seconds_; }

 private:
  struct Episode {
    std::unique_ptr<EnvEpisode> env;
    std::vector<ChatMessage> conversation;  // chat prompts: the messages so far
  };
  // The observation's tokens (cut to max_observation_tokens), after the
  // reply `turn` whose text without special tokens is `reply`.
  std::vector<int32_t> observation_ids(Episode& episode, std::span<const int32_t> turn, const std::string& reply,
                                       std::string observation, EpisodeRecord& record);
  template <class Call>
  auto timed(Call call);

  EnvScript& env_;
  const Tokenizer& tokenizer_;
  const EnvPlan& plan_;
  std::vector<Episode> episodes_;
  std::vector<EpisodeRecord> records_;
  int64_t calls_ = 0;
  double seconds_ = 0;
};

}  // namespace meshrun::ppo_detail
