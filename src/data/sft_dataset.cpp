// load_sft_dataset: records → tokenised, truncated samples, with the counts
// of what was cut or dropped.
#include "meshrun/data/jsonl_reader.hpp"
#include "meshrun/data/dataset.hpp"

namespace meshrun {

std::string DatasetStats::summary() const {
  std::string text = std::to_string(samples) + " samples (" + std::to_string(tokens) + " tokens, " +
                     std::to_string(loss_tokens) + " loss tokens) from " + std::to_string(lines) + " lines";
  if (truncated > 0) text += ", " + std::to_string(truncated) + " truncated to max_len";
  if (dropped() > 0) {
    text += ", " + std::to_string(dropped()) + " dropped (" + std::to_string(dropped_prompt_fills_max_len) +
            " prompt fills max_len, " + std::to_string(dropped_no_response_token) + " no response token)";
  }
  return text;
}

SftDataset load_sft_dataset(const DataConfig& given, const Tokenizer& tokenizer, int max_errors,
                            DataReadLimit limit) {
  const DataConfig config = data::with_resolved_path(given);
  if (config.max_len < 2) {
    throw DataError({DataProblem{config.path, 0, "", "data.max_len must be at least 2 (a prompt token and a "
                                                     "response token), got " + std::to_string(config.max_len)}},
                    1);
  }
  bool stopped_short = false;
  if (!limit.truncated) limit.truncated = &stopped_short;
  const std::vector<SftRecord> records = read_sft_records(config, max_errors, limit);
  SftDataset dataset;
  dataset.path = config.path;
  dataset.stats.lines = static_cast<long long>(records.size());
  data::ProblemList problems(config.path, max_errors);
  for (const SftRecord& record : records) {
    SftSample sample;
    try {
      sample = tokenize_sft_record(record, tokenizer, config.path, config.loss_turns);
    } catch (const DataError& error) {
      for (const DataProblem& problem : error.problems()) problems.add(problem);
      continue;
    }
    const bool prompt_fills = sample.prompt_len >= config.max_len;
    const bool cut = sample.size() > config.max_len;
    if (!truncate_sample(sample, config.max_len)) {
      ++(prompt_fills ? dataset.stats.dropped_prompt_fills_max_len : dataset.stats.dropped_no_response_token);
      continue;
    }
    if (cut) ++dataset.stats.truncated;
    dataset.stats.tokens += sample.size();
    dataset.stats.loss_tokens += sample.loss_tokens();
    dataset.samples.push_back(std::move(sample));
  }
  problems.throw_if_any();
  dataset.stats.samples = static_cast<long long>(dataset.samples.size());
  if (dataset.samples.empty() && !*limit.truncated) {
    throw DataError({DataProblem{config.path, 0, "", "every sample was dropped (" + dataset.stats.summary() +
                                                         "): raise data.max_len or shorten the prompts"}},
                    1);
  }
  return dataset;
}

}  // namespace meshrun
