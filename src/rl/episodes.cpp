// Multi-turn episodes (episodes.hpp).
#include "episodes.hpp"

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace meshrun::ppo_detail {
namespace {

// Bytes of an observation looked at per allowed token: enough for any
// token of a real vocabulary, and a bound on the work a huge observation
// costs before it is cut.
constexpr size_t kObservationBytesPerToken = 64;

nlohmann::json messages_json(const std::vector<ChatMessage>& messages) {
  nlohmann::json out = nlohmann::json::array();
  for (const ChatMessage& message : messages) {
    if (!message.fields) {
      out.push_back({{"role", message.role}, {"content", message.content}});
      continue;
    }
    // Fields are ordered JSON (as the template reads them): one conversion.
    out.push_back(nlohmann::json::parse(chat_message_json(message).dump()));
  }
  return out;
}

bool starts_with(std::string_view text, std::string_view prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

template <class Call>
auto Episodes::timed(Call call) {
  const auto begin = std::chrono::steady_clock::now();
  struct Count {
    Episodes& self;
    std::chrono::steady_clock::time_point begin;
    ~Count() {
      ++self.calls_;
      self.seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    }
  } count{*this, begin};
  return call();
}

Episodes::Episodes(EnvScript& env, const Tokenizer& tokenizer, const EnvPlan& plan, const std::vector<Start>& starts)
    : env_(env), tokenizer_(tokenizer), plan_(plan), records_(starts.size()) {
  episodes_.reserve(starts.size());
  for (const Start& start : starts) {
    Episode episode;
    episode.conversation = start.prompt->messages;
    const nlohmann::json messages = messages_json(start.prompt->messages);
    EnvContext context;
    context.prompt = start.prompt->text;
    context.messages = start.prompt->messages.empty() ? nullptr : &messages;
    context.label = start.prompt->label ? &*start.prompt->label : nullptr;
    context.index = start.index;
    context.sample = start.sample;
    episode.env = timed([&] { return env_.reset(context); });
    episodes_.push_back(std::move(episode));
  }
}

std::vector<int32_t> Episodes::observation_ids(Episode& episode, std::span<const int32_t> turn,
                                               const std::string& reply, std::string observation,
                                               EpisodeRecord& record) {
  // Cut to max_observation_tokens, the text first so that a huge one costs
  // a bounded tokenisation.
  const auto limit = static_cast<size_t>(plan_.max_observation_tokens);
  bool cut = false;
  if (observation.size() > limit * kObservationBytesPerToken) {
    // At a character's first byte, so the text stays valid UTF-8.
    size_t end = limit * kObservationBytesPerToken;
    while (end > 0 && (static_cast<unsigned char>(observation[end]) & 0xC0) == 0x80) --end;
    observation.resize(end);
    cut = true;
  }
  std::vector<int32_t> ids = tokenizer_.encode(observation, false);
  if (ids.size() > limit) {
    ids.resize(limit);
    observation = tokenizer_.decode(ids, false);
    cut = true;
  }
  ++record.observations;
  if (cut) ++record.observations_cut;
  if (episode.conversation.empty()) return ids;  // plain prompts: the observation's own tokens

  // Chat: the template's delta. P: the conversation before the reply, with
  // the generation prompt (where the model began); A: with the reply; B:
  // with the observation and the next generation prompt.
  const std::string before = tokenizer_.apply_chat_template(episode.conversation, true);
  episode.conversation.push_back({"assistant", reply});
  const std::string with_reply = tokenizer_.apply_chat_template(episode.conversation, false);
  episode.conversation.push_back({plan_.observation_role, observation});
  const std::string with_observation = tokenizer_.apply_chat_template(episode.conversation, true);
  if (!starts_with(with_observation, with_reply))
    throw Error(
        ErrorKind::config,
        "env: the chat template renders the conversation with the observation (role \"" + plan_.observation_role +
        "\") not as a continuation of the conversation before it, so the observation's tokens cannot be appended "
        "to the episode (" + tokenizer_.description() + ")",
        "env.observation_role");
  // What the template writes after the reply that the model did not: the
  // rendered reply's tail past the model's own text (with its special
  // tokens, else without); nothing when the template rewrote the reply.
  std::string closing;
  if (starts_with(with_reply, before)) {
    const std::string_view tail = std::string_view(with_reply).substr(before.size());
    const std::string own = tokenizer_.decode(turn, false);
    if (starts_with(tail, own)) closing = tail.substr(own.size());
    else if (starts_with(tail, reply)) closing = tail.substr(reply.size());
  }
  return tokenizer_.encode(closing + with_observation.substr(with_reply.size()), false);
}

TurnEnd Episodes::end_turn(size_t request, const GeneratedSample& sample, int64_t turn_begin, int64_t room) {
  Episode& episode = episodes_.at(request);
  EpisodeRecord& record = records_.at(request);
  const std::span<const int32_t> turn = std::span<const int32_t>(sample.response).subspan(static_cast<size_t>(turn_begin));
  const std::string reply = tokenizer_.decode(turn, true);
  const EnvStepResult result = timed([&] { return env_.step(*episode.env, reply); });
  record.env_reward += result.reward;
  TurnEnd end;
  if (result.done || !result.observation) {
    record.end = EpisodeEnd::done;
    return end;
  }
  record.end = EpisodeEnd::truncated;  // unless it goes on below
  if (sample.turns >= plan_.max_turns || room <= 1) return end;
  std::vector<int32_t> ids = observation_ids(episode, turn, reply, *result.observation, record);
  if (static_cast<int64_t>(ids.size()) >= room) return end;
  end.finished = false;
  end.observation = std::move(ids);
  return end;
}

}  // namespace meshrun::ppo_detail
