// Lint of the data file (src/lint/data_lint.cpp): bad lines located at
// FILE:LINE by the loaders' own checks, at most 20 then a count, a bounded
// prefix of a large file, a line too long to hold, and the algorithm's data
// shape deciding which keys a line needs; a JSON array file by its
// elements, a Parquet file refused.
#include <doctest/doctest.h>

#include <fstream>

#include "meshrun/lint/lint.hpp"
#include "recipe/diagnostic_matchers.hpp"
#include "meshrun/data/jsonl_reader.hpp"

namespace meshrun {
namespace {

Recipe recipe_for(const std::string& algorithm, const std::string& data_path, const std::string& label_key = "") {
  std::vector<std::string> sets = {"data.path=" + data_path, "data.input_key=prompt"};
  if (!label_key.empty()) sets.push_back("data.label_key=" + label_key);
  auto loaded = test::load_text("algorithm = \"" + algorithm + "\"\n[roles.actor]\nmodel = \"builtin:tiny\"\n", sets);
  REQUIRE(loaded.recipe);
  return *loaded.recipe;
}

std::vector<std::string> messages_of(const Diagnostics& diagnostics) {
  std::vector<std::string> out;
  for (const auto& d : diagnostics.sorted()) out.push_back(d.where.str() + ": " + d.message);
  return out;
}

}  // namespace

TEST_CASE("each bad prompt line is an error at FILE:LINE") {
  test::TempDir dir;
  const std::string path = dir.write("p.jsonl",
                                     "{\"prompt\": \"ok\", \"y\": 1}\n"
                                     "not json\n"
                                     "{\"prompt\": 2, \"y\": 1}\n"
                                     "{\"prompt\": \"no label\"}\n"
                                     "\n"
                                     "{\"y\": 3}\n")
                               .string();
  Diagnostics diagnostics;
  check_data_file(recipe_for("ppo", path, "y"), diagnostics);
  const auto found = messages_of(diagnostics);
  REQUIRE(found.size() == 4);
  CHECK(found[0].starts_with(path + ":2: not JSON"));
  CHECK(found[1] == path + ":3: key \"prompt\": must be a string, got number");
  CHECK(found[2] == path + ":4: key \"y\": missing (data.label_key names the label every prompt carries)");
  CHECK(found[3] == path + ":6: key \"prompt\": missing (a prompt needs \"prompt\" or \"messages\")");
  CHECK(test::with_rule(diagnostics, "data.line").size() == 4);
  // Without a label key the label is not needed.
  Diagnostics without_labels;
  check_data_file(recipe_for("ppo", path), without_labels);
  CHECK(without_labels.error_count() == 3);
  // SFT lines need a response: every line here lacks "output".
  Diagnostics sft;
  check_data_file(recipe_for("sft", path), sft);
  CHECK(sft.error_count() == 6);
}

TEST_CASE("a JSON array file lints by its elements' lines; a Parquet file is one located error") {
  test::TempDir dir;
  const std::string array = dir.write("p.json",
                                      "[\n  {\"prompt\": \"ok\", \"meta\": {\"y\": 1}},\n  {\"prompt\": 3, \"meta\": "
                                      "{\"y\": 2}},\n  {\"prompt\": \"no label\"}\n]\n")
                                .string();
  Diagnostics diagnostics;
  check_data_file(recipe_for("ppo", array, "meta.y"), diagnostics);
  const auto found = messages_of(diagnostics);
  REQUIRE(found.size() == 2);
  CHECK(found[0] == array + ":3: key \"prompt\": must be a string, got number");
  CHECK(found[1] == array + ":4: key \"meta.y\": missing (data.label_key names the label every prompt carries)");
  const std::string parquet = dir.write("p.parquet", std::string("PAR1\0\0\0\0", 8)).string();
  Diagnostics refused;
  check_data_file(recipe_for("ppo", parquet), refused);
  const auto parquet_found = messages_of(refused);
  REQUIRE(parquet_found.size() == 1);
  CHECK(parquet_found[0].starts_with(parquet + ": is a Parquet file; meshrun reads JSON Lines or one JSON array"));
}

TEST_CASE("a conversation longer than the run accepts is lint's error too, at its line") {
  test::TempDir dir;
  std::string turns;
  for (int i = 0; i < 4097; ++i)
    turns += std::string(i ? "," : "") + "{\"role\": \"" + (i % 2 ? "user" : "assistant") + "\", \"content\": \"x\"}";
  const std::string path =
      dir.write("chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", "
                              "\"content\": \"yo\"}]}\n{\"messages\": [" + turns + "]}\n")
          .string();
  auto loaded = test::load_text("algorithm = \"sft\"\n[roles.actor]\nmodel = \"builtin:tiny\"\n", {"data.path=" + path});
  REQUIRE(loaded.recipe);
  Diagnostics diagnostics;
  check_data_file(*loaded.recipe, diagnostics);
  const auto found = messages_of(diagnostics);
  REQUIRE(found.size() == 1);
  CHECK(found[0] == path + ":2: key \"messages\": a conversation of 4097 messages; at most 4096 are accepted (split it "
                          "into several records)");
}

TEST_CASE("at most 20 bad lines are shown, then how many more") {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 25; ++i) text += "[" + std::to_string(i) + "]\n";
  const std::string path = dir.write("p.jsonl", text).string();
  Diagnostics diagnostics;
  check_data_file(recipe_for("ppo", path), diagnostics);
  const auto found = messages_of(diagnostics);
  REQUIRE(found.size() == 21);
  CHECK(found.front() == path + ": 5 more bad lines not shown");
  CHECK(found.back() == path + ":20: expected a JSON object, got array");
}

TEST_CASE("a large file is read up to the limit, and says so") {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 100; ++i) text += "{\"prompt\": \"p" + std::to_string(i) + "\"}\n";
  text += "broken\n";
  const std::string path = dir.write("p.jsonl", text).string();
  Diagnostics limited;
  check_data_file(recipe_for("ppo", path), limited, 500);
  CHECK(limited.error_count() == 0);
  REQUIRE(limited.sorted().size() == 1);
  CHECK(limited.sorted()[0].severity == Severity::note);
  CHECK(limited.sorted()[0].message.find("checked the first") != std::string::npos);
  Diagnostics whole;
  check_data_file(recipe_for("ppo", path), whole);
  const auto found = messages_of(whole);
  REQUIRE(found.size() == 1);
  CHECK(found[0].starts_with(path + ":101: not JSON: "));
}

TEST_CASE("a line longer than the reader holds is a problem, not an allocation") {
  test::TempDir dir;
  const std::string path = (dir.path() / "long.jsonl").string();
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"prompt\": \"a\"}\n{\"prompt\": \"";
    const std::string chunk(1 << 20, 'x');
    for (long long written = 0; written <= data::kMaxJsonlLineBytes; written += static_cast<long long>(chunk.size()))
      out << chunk;
    out << "\"}\n{\"prompt\": \"b\"}\n";
  }
  Diagnostics diagnostics;
  check_data_file(recipe_for("ppo", path), diagnostics);
  CHECK(messages_of(diagnostics) == std::vector<std::string>{path + ":2: longer than 64 MiB"});
}

TEST_CASE("a data path that is not a local file is left to run time") {
  Diagnostics diagnostics;
  check_data_file(recipe_for("ppo", "org/some-dataset"), diagnostics);
  CHECK(diagnostics.empty());
}

}  // namespace meshrun

namespace meshrun {

TEST_CASE("data.eval_path is linted like data.path, where the algorithm evaluates") {
  test::TempDir dir;
  const std::string train = dir.write("train.jsonl", "{\"prompt\": \"a\", \"output\": \"b\"}\n").string();
  const std::string eval = dir.write("eval.jsonl",
                                     "{\"prompt\": \"a\", \"output\": \"b\"}\n"
                                     "not json\n")
                               .string();
  auto loaded = test::load_text("algorithm = \"sft\"\n[roles.actor]\nmodel = \"builtin:tiny\"\n",
                                {"data.path=" + train, "data.input_key=prompt", "data.eval_path=" + eval});
  REQUIRE(loaded.recipe);
  Diagnostics diagnostics;
  check_data_file(*loaded.recipe, diagnostics);
  const auto found = messages_of(diagnostics);
  REQUIRE(found.size() == 1);
  CHECK(found[0].starts_with(eval + ":2: not JSON"));
  // The training file alone is clean.
  Diagnostics train_only;
  check_data_file(recipe_for("sft", train), train_only);
  CHECK(train_only.error_count() == 0);
}

}  // namespace meshrun
