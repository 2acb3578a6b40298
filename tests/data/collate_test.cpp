// Tests of src/data/collate.cpp: the padded row-major arrays of a
// micro-batch, packed and not.
#include <doctest/doctest.h>

#include "data_test_support.hpp"
#include "meshrun/data/data.hpp"

namespace meshrun {
namespace {

using data_test::FakeTokenizer;

SftSample sample(std::vector<int32_t> ids, int prompt_len) {
  SftSample out;
  out.input_ids = std::move(ids);
  out.prompt_len = prompt_len;
  out.loss_mask.assign(out.input_ids.size(), 0);
  for (std::size_t i = static_cast<std::size_t>(prompt_len); i < out.loss_mask.size(); ++i) out.loss_mask[i] = 1;
  return out;
}

SftDataset three_samples() {
  SftDataset dataset;
  dataset.samples = {sample({10, 11, 12}, 2), sample({20, 21, 22, 23, 24}, 1), sample({30, 31}, 1)};
  return dataset;
}

TEST_CASE("one sample per row, padded to the longest of the micro-batch") {
  const SftDataset dataset = three_samples();
  const PackedSequences sequences = arrange_sequences(dataset, 8, false);
  const std::vector<int64_t> rows = {2, 0};
  const MicroBatch batch = collate(dataset, sequences, rows, 99);
  CHECK(batch.rows == 2);
  CHECK(batch.length == 3);
  CHECK(batch.input_ids == std::vector<int32_t>{30, 31, 99, 10, 11, 12});
  CHECK(batch.loss_mask == std::vector<int32_t>{0, 1, 0, 0, 0, 1});
  CHECK(batch.position_ids == std::vector<int32_t>{0, 1, 0, 0, 1, 2});
  CHECK(batch.sequence_ids == std::vector<int32_t>{0, 0, -1, 0, 0, 0});
  CHECK(batch.attention_mask == std::vector<int32_t>{1, 1, 0, 1, 1, 1});
  CHECK(batch.tokens == 5);
  CHECK(batch.loss_tokens == 2);
  CHECK(batch.samples == 2);
  CHECK(batch.sequences == rows);
  CHECK(batch.at(1, 2) == 5);
}

TEST_CASE("packed rows restart positions per sample and number the samples") {
  const SftDataset dataset = three_samples();
  const PackedSequences packed = arrange_sequences(dataset, 8, true);
  // Lengths 3, 5, 2 with capacity 8: [5, 3] and [2].
  REQUIRE(packed.members == std::vector<std::vector<int64_t>>{{1, 0}, {2}});
  const std::vector<int64_t> rows = {0, 1};
  const MicroBatch batch = collate(dataset, packed, rows, 0);
  CHECK(batch.length == 8);
  CHECK(batch.input_ids == std::vector<int32_t>{20, 21, 22, 23, 24, 10, 11, 12, 30, 31, 0, 0, 0, 0, 0, 0});
  CHECK(batch.position_ids == std::vector<int32_t>{0, 1, 2, 3, 4, 0, 1, 2, 0, 1, 0, 0, 0, 0, 0, 0});
  CHECK(batch.sequence_ids == std::vector<int32_t>{0, 0, 0, 0, 0, 1, 1, 1, 0, 0, -1, -1, -1, -1, -1, -1});
  CHECK(batch.loss_mask == std::vector<int32_t>{0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0});
  CHECK(batch.attention_mask == std::vector<int32_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0});
  CHECK(batch.samples == 3);
  CHECK(batch.tokens == 10);
  CHECK(batch.loss_tokens == 6);
}

TEST_CASE("bad micro-batches are refused") {
  const SftDataset dataset = three_samples();
  const PackedSequences sequences = arrange_sequences(dataset, 8, false);
  CHECK_THROWS_AS(collate(dataset, sequences, std::vector<int64_t>{}, 0), std::logic_error);
  CHECK_THROWS_WITH_AS(collate(dataset, sequences, std::vector<int64_t>{3}, 0),
                       "collate: sequence 3 is outside [0, 3)", std::logic_error);
  PackedSequences wrong = sequences;
  wrong.lengths[0] = 2;  // shorter than its sample
  CHECK_THROWS_AS(collate(dataset, wrong, std::vector<int64_t>{0}, 0), std::logic_error);
  wrong = sequences;
  wrong.members[0] = {7};
  CHECK_THROWS_AS(collate(dataset, wrong, std::vector<int64_t>{0}, 0), std::logic_error);
}

TEST_CASE("the pad id: the tokenizer's pad, else eos, else 0") {
  FakeTokenizer tokenizer;
  CHECK(padding_id(tokenizer) == 258);
  tokenizer.has_pad = false;
  CHECK(padding_id(tokenizer) == 257);
  tokenizer.has_eos = false;
  CHECK(padding_id(tokenizer) == 0);
}

}  // namespace
}  // namespace meshrun
