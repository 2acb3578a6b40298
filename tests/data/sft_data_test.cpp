// Tests of src/data/sft_data.cpp: the pipeline for each dp rank from a
// file, packed and not, with resume.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include "data_test_support.hpp"
#include "meshrun/data/data.hpp"

namespace meshrun {
namespace {

using data_test::data_config;
using data_test::FakeTokenizer;
using data_test::ScratchFolder;

// n prompt/response lines of varied lengths: "p<i>" → "r<i> × (i % 5)".
std::string make_jsonl(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    std::string response(static_cast<std::size_t>(1 + i % 5), static_cast<char>('a' + i % 26));
    text += "{\"input\": \"p" + std::to_string(i) + "\", \"output\": \"" + response + "\"}\n";
  }
  return text;
}

Batching batch_of(int micro, int train, int64_t seed = 42, int epochs = 1) {
  Batching batching;
  batching.micro_batch = micro;
  batching.global_batch = train;
  batching.seed = seed;
  batching.epochs = epochs;
  return batching;
}

// Which dataset line every token of a step came from, keyed by line.
std::map<long long, int> lines_in(const SftData& data, const SftStep& step) {
  std::map<long long, int> lines;
  for (const MicroBatch& micro : step.micro_batches) {
    for (const int64_t sequence : micro.sequences) {
      for (const int64_t sample : data.sequences().members[static_cast<std::size_t>(sequence)]) {
        ++lines[data.dataset().samples[static_cast<std::size_t>(sample)].line];
      }
    }
  }
  return lines;
}

TEST_CASE("dp ranks together cover each global batch once, with micro-batches of micro_train rows") {
  ScratchFolder folder;
  const DataConfig config = data_config(folder.write("d.jsonl", make_jsonl(50)), 64);
  FakeTokenizer tokenizer;
  std::vector<SftData> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.emplace_back(config, batch_of(2, 8, 7, 1), tokenizer, SftDataOptions{rank, 2});
  }
  CHECK(ranks[0].grad_accum() == 2);
  CHECK(ranks[0].steps_per_epoch() == 6);
  CHECK(ranks[0].total_steps() == 6);
  CHECK(ranks[0].pad_id() == 258);
  std::map<long long, int> seen;
  for (int64_t s = 0; s < 6; ++s) {
    for (auto& data : ranks) {
      const auto step = data.next();
      REQUIRE(step);
      CHECK(step->global_step == s);
      REQUIRE(step->micro_batches.size() == 2);
      for (const MicroBatch& micro : step->micro_batches) {
        CHECK(micro.rows == 2);
        CHECK(micro.samples == 2);
      }
      for (const auto& [line, count] : lines_in(data, *step)) seen[line] += count;
    }
  }
  CHECK(seen.size() == 48);  // 6 × 8; the last 2 of 50 dropped with the incomplete batch
  for (const auto& [line, count] : seen) CHECK(count == 1);
  CHECK_FALSE(ranks[0].next());
  CHECK_FALSE(ranks[1].next());
}

TEST_CASE("packing: sequences of several samples, every sample trained on once per epoch") {
  ScratchFolder folder;
  const DataConfig config = data_config(folder.write("d.jsonl", make_jsonl(60)), 24, true);
  FakeTokenizer tokenizer;
  SftData data(config, batch_of(1, 2, 3, 1), tokenizer);
  const PackedSequences& packed = data.sequences();
  CHECK(packed.size() < 60);
  CHECK(packed.fill_ratio() > 0.8);
  std::map<long long, int> seen;
  long long samples = 0;
  while (auto step = data.next()) {
    for (const MicroBatch& micro : step->micro_batches) {
      CHECK(micro.length <= 24);
      samples += micro.samples;
      // Position ids restart where the sequence id changes.
      for (int t = 1; t < micro.length; ++t) {
        const std::size_t cell = micro.at(0, t);
        if (micro.sequence_ids[cell] < 0) break;
        if (micro.sequence_ids[cell] != micro.sequence_ids[cell - 1]) {
          CHECK(micro.position_ids[cell] == 0);
          CHECK(micro.loss_mask[cell] == 0);
        } else {
          CHECK(micro.position_ids[cell] == micro.position_ids[cell - 1] + 1);
        }
      }
    }
    for (const auto& [line, count] : lines_in(data, *step)) seen[line] += count;
  }
  const long long expected_sequences = packed.size() - packed.size() % 2;
  long long expected_samples = 0;
  for (const auto& [line, count] : seen) {
    CHECK(count == 1);
    expected_samples += count;
  }
  CHECK(samples == expected_samples);
  CHECK(data.total_steps() == expected_sequences / 2);
}

TEST_CASE("a run resumed from a saved state continues with the same micro-batches") {
  ScratchFolder folder;
  const DataConfig config = data_config(folder.write("d.jsonl", make_jsonl(30)), 32, true);
  FakeTokenizer tokenizer;
  SftData uninterrupted(config, batch_of(1, 2, 11, 2), tokenizer);
  std::vector<SftStep> all;
  while (auto step = uninterrupted.next()) all.push_back(*step);
  REQUIRE(all.size() > 4);

  SftData first(config, batch_of(1, 2, 11, 2), tokenizer);
  for (int i = 0; i < 3; ++i) first.next();
  SftData resumed(config, batch_of(1, 2, 11, 2), tokenizer);
  resumed.restore(SamplerState::from_json(first.state().to_json()));
  for (std::size_t i = 3; i < all.size(); ++i) {
    const auto step = resumed.next();
    REQUIRE(step);
    CHECK(step->global_step == all[i].global_step);
    REQUIRE(step->micro_batches.size() == all[i].micro_batches.size());
    for (std::size_t m = 0; m < step->micro_batches.size(); ++m) {
      CHECK(step->micro_batches[m].input_ids == all[i].micro_batches[m].input_ids);
      CHECK(step->micro_batches[m].sequence_ids == all[i].micro_batches[m].sequence_ids);
    }
  }
  CHECK_FALSE(resumed.next());
}

TEST_CASE("batching: batch, seed and epochs; data short of one batch is refused naming the file") {
  ScratchFolder folder;
  const DataConfig config = data_config(folder.write("d.jsonl", make_jsonl(20)), 64);
  FakeTokenizer tokenizer;
  SftData data(config, batch_of(2, 4, 5, 3), tokenizer);
  CHECK(data.total_steps() == 15);
  CHECK(data.state().seed == 5);
  CHECK(data.dataset().stats.samples == 20);

  CHECK_THROWS_AS(SftData(config, batch_of(3, 4), tokenizer), ConfigError);
  const std::string refusal = "the dataset " + config.path + " has 20 sequences, fewer than one global batch";
  CHECK_THROWS_WITH_AS(SftData(config, batch_of(1, 32), tokenizer), doctest::Contains(refusal.c_str()),
                       ConfigError);
}

}  // namespace
}  // namespace meshrun

namespace meshrun {

TEST_CASE("eval_split: every item once across the ranks, the same number of groups on each") {
  // 7 items over 3 ranks in groups of 2: rank 0 takes 0, 3 | 6; ranks 1 and
  // 2 take 1, 4 and 2, 5, and run a second group too, a stand-in that does
  // not count.
  std::vector<int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    const EvalSplit split = eval_split(7, 2, 3, rank);
    REQUIRE(split.groups.size() == 2);
    REQUIRE(split.counted.size() == 2);
    for (std::size_t g = 0; g < split.groups.size(); ++g)
      if (split.counted[g]) seen.insert(seen.end(), split.groups[g].begin(), split.groups[g].end());
    CHECK(split.counted[0]);
    CHECK(split.counted[1] == (rank == 0));
  }
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6});
  // Fewer items than ranks: the rank without one still runs a stand-in.
  const EvalSplit short_split = eval_split(1, 4, 2, 1);
  REQUIRE(short_split.groups.size() == 1);
  CHECK_FALSE(short_split.counted[0]);
  CHECK_THROWS_AS(eval_split(0, 1, 1, 0), ConfigError);
  CHECK_THROWS_AS(eval_split(4, 0, 1, 0), std::logic_error);
}

}  // namespace meshrun
