// Preference pairs: JSONL → pairs of SFT samples → micro-batches of whole
// pairs (include/meshrun/data/preference.hpp).
#include "meshrun/data/jsonl_reader.hpp"
#include "meshrun/data/preference.hpp"

namespace meshrun {

namespace {

using nlohmann::json;

// One response of a pair, as read: a string or a list of messages.
struct Response {
  std::optional<std::string> text;
  std::vector<ChatMessage> messages;
};

std::optional<Response> read_response(const json& object, const std::string& key, long long line,
                                      data::ProblemList& problems) {
  const json* found = data::field(object, key);
  if (!found) {
    problems.add(line, key, "missing (a preference pair needs a prompt, a chosen and a rejected response)");
    return std::nullopt;
  }
  Response out;
  if (found->is_string()) {
    out.text = found->get<std::string>();
    return out;
  }
  if (!found->is_array()) {
    problems.add(line, key, "must be a string or a list of {\"role\", \"content\"} messages, got " +
                                data::json_type_name(*found));
    return std::nullopt;
  }
  if (!data::read_chat_messages(*found, key, line, problems, out.messages)) return std::nullopt;
  if (out.messages.back().role != "assistant") {
    problems.add(line, key + "[" + std::to_string(out.messages.size() - 1) + "].role",
                 "the last message must be the assistant's (the response compared), got \"" +
                     out.messages.back().role + "\"");
    return std::nullopt;
  }
  return out;
}

// The SFT record of the prompt followed by one response.
SftRecord record_of(long long line, const std::optional<std::string>& prompt_text,
                    const std::vector<ChatMessage>& prompt_messages, const Response& response) {
  SftRecord record;
  record.line = line;
  if (prompt_text) {
    record.input = *prompt_text;
    record.output = *response.text;
    return record;
  }
  record.is_chat = true;
  record.messages = prompt_messages;
  if (response.text) record.messages.push_back(ChatMessage{"assistant", *response.text});
  else record.messages.insert(record.messages.end(), response.messages.begin(), response.messages.end());
  return record;
}

// Pair i's chosen sample at 2i, its rejected one at 2i + 1, each its own
// sequence.
struct FlatPairs {
  SftDataset samples;
  PackedSequences sequences;
};

FlatPairs flatten(const PreferenceDataset& dataset, int max_len) {
  FlatPairs out;
  out.samples.path = dataset.path;
  out.samples.samples.reserve(2 * dataset.pairs.size());
  std::vector<int> lengths;
  for (const PreferencePair& pair : dataset.pairs) {
    out.samples.samples.push_back(pair.chosen);
    out.samples.samples.push_back(pair.rejected);
    lengths.push_back(pair.chosen.size());
    lengths.push_back(pair.rejected.size());
  }
  out.sequences = one_sample_per_sequence(lengths, max_len);
  return out;
}

// The rows of a micro-batch of `pairs`: their chosen sequences, then their
// rejected ones.
std::vector<int64_t> rows_of(const std::vector<int64_t>& pairs) {
  std::vector<int64_t> rows;
  rows.reserve(2 * pairs.size());
  for (const int64_t pair : pairs) rows.push_back(2 * pair);
  for (const int64_t pair : pairs) rows.push_back(2 * pair + 1);
  return rows;
}

}  // namespace

std::string PreferenceDataset::summary() const {
  std::string text = std::to_string(pairs.size()) + " pairs from " + std::to_string(lines) + " lines";
  if (truncated > 0) text += ", " + std::to_string(truncated) + " truncated to max_len";
  if (dropped > 0) text += ", " + std::to_string(dropped) + " dropped (a response left without tokens by max_len)";
  if (identical > 0)
    text += ", " + std::to_string(identical) + " dropped (chosen and rejected the same within max_len)";
  return text;
}

std::vector<PreferenceRecord> read_preference_records(const DataConfig& given, int max_errors, DataReadLimit limit) {
  const DataConfig config = data::with_resolved_path(given);
  data::ProblemList problems(config.path, max_errors);
  std::vector<PreferenceRecord> records;
  data::read_jsonl(config.path, problems, [&](long long line, const json& object) {
    std::optional<std::string> prompt_text;
    std::vector<ChatMessage> prompt_messages;
    bool ok = true;
    if (const json* prompt = data::field(object, config.input_key); !prompt) {
      problems.add(line, config.input_key, "missing (the prompt: a string or a list of messages)");
      ok = false;
    } else if (prompt->is_string()) {
      prompt_text = prompt->get<std::string>();
    } else if (prompt->is_array()) {
      ok = data::read_chat_messages(*prompt, config.input_key, line, problems, prompt_messages);
    } else {
      problems.add(line, config.input_key,
                   "must be a string or a list of {\"role\", \"content\"} messages, got " +
                       data::json_type_name(*prompt));
      ok = false;
    }
    const auto chosen = read_response(object, config.chosen_key, line, problems);
    const auto rejected = read_response(object, config.rejected_key, line, problems);
    if (!ok || !chosen || !rejected) return;
    if (chosen->text.has_value() != rejected->text.has_value()) {
      problems.add(line, config.rejected_key,
                   std::string("must be a ") + (chosen->text ? "string" : "list of messages") + " like \"" +
                       config.chosen_key + "\"");
      return;
    }
    if (prompt_text && !chosen->text) {
      problems.add(line, config.input_key,
                   "is a string, but the responses are lists of messages: give the prompt as a list of messages too");
      return;
    }
    if (*data::field(object, config.chosen_key) == *data::field(object, config.rejected_key)) {
      problems.add(line, config.rejected_key,
                   "is the same as \"" + config.chosen_key + "\": a pair must prefer one response over another");
      return;
    }
    records.push_back(PreferenceRecord{line, record_of(line, prompt_text, prompt_messages, *chosen),
                                       record_of(line, prompt_text, prompt_messages, *rejected)});
  }, limit);
  problems.throw_if_any();
  if (records.empty())
    throw DataError({DataProblem{config.path, 0, "", "the dataset is empty: no non-blank line"}}, 1);
  return records;
}

PreferenceDataset load_preference_dataset(const DataConfig& given, const Tokenizer& tokenizer, int max_errors,
                                          DataReadLimit limit) {
  const DataConfig config = data::with_resolved_path(given);
  if (config.max_len < 2)
    throw DataError({DataProblem{config.path, 0, "", "data.max_len must be at least 2 (a prompt token and a "
                                                     "response token), got " + std::to_string(config.max_len)}},
                    1);
  bool stopped_short = false;
  if (!limit.truncated) limit.truncated = &stopped_short;
  const std::vector<PreferenceRecord> records = read_preference_records(config, max_errors, limit);
  PreferenceDataset dataset;
  dataset.path = config.path;
  dataset.lines = static_cast<long long>(records.size());
  data::ProblemList problems(config.path, max_errors);
  for (const PreferenceRecord& record : records) {
    PreferencePair pair;
    pair.line = record.line;
    try {
      pair.chosen = tokenize_sft_record(record.chosen, tokenizer, config.path, LossTurns::last);
      pair.rejected = tokenize_sft_record(record.rejected, tokenizer, config.path, LossTurns::last);
    } catch (const DataError& error) {
      for (const DataProblem& problem : error.problems()) problems.add(problem);
      continue;
    }
    const bool cut = pair.chosen.size() > config.max_len || pair.rejected.size() > config.max_len;
    // Both truncated (no short-circuit): a kept pair has both within max_len.
    const bool chosen_kept = truncate_sample(pair.chosen, config.max_len);
    const bool rejected_kept = truncate_sample(pair.rejected, config.max_len);
    if (!chosen_kept || !rejected_kept) {
      ++dataset.dropped;
      continue;
    }
    // Cut where they still agreed, the two replies are the same sequence:
    // the pair's log-ratios cancel and it carries no preference, only
    // weight in the loss's mean and the accuracy.
    if (cut && pair.chosen.input_ids == pair.rejected.input_ids && pair.chosen.loss_mask == pair.rejected.loss_mask) {
      ++dataset.identical;
      continue;
    }
    if (cut) ++dataset.truncated;
    dataset.pairs.push_back(std::move(pair));
  }
  problems.throw_if_any();
  if (dataset.pairs.empty() && !*limit.truncated)
    throw DataError({DataProblem{config.path, 0, "",
                                 "no pair is left: " + dataset.summary() + " (raise data.max_len)"}},
                    1);
  return dataset;
}

EvalBatches preference_eval_batches(const DataConfig& data, int micro_batch, const Tokenizer& tokenizer,
                                    const SftDataOptions& options) {
  DataConfig config = data;
  config.path = data.eval_path;
  const PreferenceDataset dataset = load_preference_dataset(config, tokenizer, options.max_errors);
  const FlatPairs flat = flatten(dataset, config.max_len);
  const EvalSplit split = eval_split(static_cast<int64_t>(dataset.pairs.size()), micro_batch,
                                     options.dp_size, options.dp_rank);
  EvalBatches out;
  out.counted = split.counted;
  const int32_t pad = padding_id(tokenizer);
  for (const auto& group : split.groups) out.batches.push_back(collate(flat.samples, flat.sequences, rows_of(group), pad));
  return out;
}

PreferenceData::PreferenceData(const DataConfig& data, const Batching& batching, const Tokenizer& tokenizer,
                               const SftDataOptions& options)
    : dataset_(load_preference_dataset(data, tokenizer, options.max_errors)),
      sampler_(SamplerConfig::of(batching, static_cast<int64_t>(dataset_.pairs.size()), options.dp_size,
                                 options.dp_rank, options.layout, data.path)),
      pad_id_(padding_id(tokenizer)) {
  FlatPairs flat = flatten(dataset_, data.max_len);
  samples_ = std::move(flat.samples);
  sequences_ = std::move(flat.sequences);
}

std::optional<SftStep> PreferenceData::next() {
  auto step = sampler_.next();
  if (!step) return std::nullopt;
  SftStep out;
  out.epoch = step->epoch;
  out.global_step = step->global_step;
  out.micro_batches.reserve(step->micro_batches.size());
  for (const auto& pairs : step->micro_batches)
    out.micro_batches.push_back(collate(samples_, sequences_, rows_of(pairs), pad_id_));
  return out;
}

}  // namespace meshrun
