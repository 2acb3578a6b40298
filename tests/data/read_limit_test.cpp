// Reading only the first lines of a data file (DataReadLimit::max_lines),
// as `meshrun data` does: the loaders stop there, say that the file goes
// on, never see a bad line past the limit, and return an empty dataset
// rather than an error when every sample read was dropped.
#include <doctest/doctest.h>

#include "data_test_support.hpp"
#include "meshrun/data/dataset.hpp"
#include "meshrun/data/preference.hpp"
#include "meshrun/data/prompts.hpp"

namespace meshrun {
namespace {

using data_test::data_config;
using data_test::FakeTokenizer;
using data_test::ScratchFolder;

DataReadLimit first_lines(long long lines, bool& truncated) {
  DataReadLimit limit;
  limit.max_lines = lines;
  limit.truncated = &truncated;
  return limit;
}

TEST_CASE("max_lines: the first non-blank lines only, the rest never parsed") {
  ScratchFolder folder;
  const std::string path = folder.write("d.jsonl", "{\"input\": \"a\", \"output\": \"b\"}\n\n"
                                                   "{\"input\": \"c\", \"output\": \"d\"}\nnot json\n");
  FakeTokenizer tokenizer;
  bool truncated = false;
  const SftDataset two =
      load_sft_dataset(data_config(path), tokenizer, kDefaultMaxDataErrors, first_lines(2, truncated));
  CHECK(truncated);
  REQUIRE(two.samples.size() == 2);
  CHECK(two.samples[1].line == 3);
  CHECK(two.stats.lines == 2);

  const auto one = read_sft_records(data_config(path), kDefaultMaxDataErrors, first_lines(1, truncated));
  CHECK(one.size() == 1);
  CHECK(truncated);
  // Past the limit, the bad line is read and reported as ever.
  CHECK_THROWS_WITH_AS(
      load_sft_dataset(data_config(path), tokenizer, kDefaultMaxDataErrors, first_lines(3, truncated)),
      doctest::Contains("d.jsonl:4"), DataError);
  CHECK_THROWS_AS(load_sft_dataset(data_config(path), tokenizer), DataError);
}

TEST_CASE("max_lines covering the whole file is not a short read") {
  ScratchFolder folder;
  const std::string path = folder.write("d.jsonl", "{\"input\": \"a\", \"output\": \"b\"}\n\n");
  FakeTokenizer tokenizer;
  bool truncated = true;
  const SftDataset dataset =
      load_sft_dataset(data_config(path), tokenizer, kDefaultMaxDataErrors, first_lines(5, truncated));
  CHECK_FALSE(truncated);
  CHECK(dataset.samples.size() == 1);
}

TEST_CASE("a short read whose samples were all dropped is empty, not an error; the whole file still is one") {
  ScratchFolder folder;
  // max_len 4: "abcdef" fills it with its prompt, "a" -> "b" fits.
  const std::string path = folder.write("d.jsonl", "{\"input\": \"abcdef\", \"output\": \"g\"}\n"
                                                   "{\"input\": \"a\", \"output\": \"b\"}\n");
  FakeTokenizer tokenizer;
  bool truncated = false;
  const SftDataset first =
      load_sft_dataset(data_config(path, 4), tokenizer, kDefaultMaxDataErrors, first_lines(1, truncated));
  CHECK(truncated);
  CHECK(first.samples.empty());
  CHECK(first.stats.dropped_prompt_fills_max_len == 1);
  CHECK(load_sft_dataset(data_config(path, 4), tokenizer, kDefaultMaxDataErrors, first_lines(2, truncated))
            .samples.size() == 1);

  const std::string only = folder.write("only.jsonl", "{\"input\": \"abcdef\", \"output\": \"g\"}\n");
  CHECK_THROWS_WITH_AS(
      load_sft_dataset(data_config(only, 4), tokenizer, kDefaultMaxDataErrors, first_lines(1, truncated)),
      doctest::Contains("every sample was dropped"), DataError);
}

TEST_CASE("max_lines for preference pairs and prompts") {
  ScratchFolder folder;
  FakeTokenizer tokenizer;
  bool truncated = false;
  const DataConfig pairs =
      data_config(folder.write("p.jsonl", "{\"input\": \"abcdef\", \"chosen\": \"x\", \"rejected\": \"y\"}\n"
                                          "{\"input\": \"q\", \"chosen\": \"x\", \"rejected\": \"y\"}\n"
                                          "[]\n"),
                  4);
  const PreferenceDataset dropped =
      load_preference_dataset(pairs, tokenizer, kDefaultMaxDataErrors, first_lines(1, truncated));
  CHECK(truncated);
  CHECK(dropped.pairs.empty());
  CHECK(dropped.dropped == 1);
  const PreferenceDataset kept =
      load_preference_dataset(pairs, tokenizer, kDefaultMaxDataErrors, first_lines(2, truncated));
  REQUIRE(kept.pairs.size() == 1);
  CHECK(kept.pairs[0].line == 2);

  const DataConfig prompts =
      data_config(folder.write("q.jsonl", "{\"input\": \"one\"}\n{\"input\": \"two\"}\n{}\n"));
  const PromptDataset first =
      load_prompt_dataset(prompts, tokenizer, 64, kDefaultMaxDataErrors, first_lines(2, truncated));
  CHECK(truncated);
  REQUIRE(first.prompts.size() == 2);
  CHECK(first.prompts[1].line == 2);
}

}  // namespace
}  // namespace meshrun
