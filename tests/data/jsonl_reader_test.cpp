// Tests of src/data/jsonl_reader.cpp and data_error.cpp: line numbers,
// blank lines, byte order marks, located problems and their limit, files of
// one JSON array, formats meshrun does not read.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "meshrun/data/jsonl_reader.hpp"
#include "data_test_support.hpp"

namespace meshrun {
namespace {

using data_test::ScratchFolder;

struct Read {
  std::vector<long long> lines;
  std::vector<nlohmann::json> objects;
  long long non_blank = 0;
};

Read read_all(const std::string& path, data::ProblemList& problems) {
  Read read;
  read.non_blank = data::read_jsonl(path, problems, [&](long long line, const nlohmann::json& object) {
    read.lines.push_back(line);
    read.objects.push_back(object);
  });
  return read;
}

TEST_CASE("read_jsonl numbers lines from 1, skips blank ones, strips CR and a byte order mark") {
  ScratchFolder folder;
  const std::string path = folder.write("a.jsonl", "\xEF\xBB\xBF{\"a\":1}\r\n\n   \n{\"a\":2}\r\n\t\n{\"a\":3}");
  data::ProblemList problems(path, 10);
  const Read read = read_all(path, problems);
  CHECK(problems.empty());
  CHECK(read.non_blank == 3);
  CHECK(read.lines == std::vector<long long>{1, 4, 6});
  REQUIRE(read.objects.size() == 3);
  CHECK(read.objects[2]["a"] == 3);
}

TEST_CASE("read_jsonl reports lines that are not JSON or not objects, and goes on") {
  ScratchFolder folder;
  const std::string path = folder.write("b.jsonl", "{\"a\":1}\n{\"a\": \n[1,2]\n\"text\"\n{\"a\":5}\n");
  data::ProblemList problems(path, 10);
  const Read read = read_all(path, problems);
  CHECK(read.lines == std::vector<long long>{1, 5});
  CHECK(problems.total() == 3);
  try {
    problems.throw_if_any();
    FAIL("expected DataError");
  } catch (const DataError& error) {
    REQUIRE(error.problems().size() == 3);
    CHECK(error.problems()[0].line == 2);
    CHECK(error.problems()[0].message.starts_with("not JSON: "));
    CHECK(error.problems()[0].message.find("[json.exception") == std::string::npos);
    CHECK(error.problems()[1].str() == path + ":3: expected a JSON object, got array");
    CHECK(error.problems()[2].str() == path + ":4: expected a JSON object, got string");
    const std::string what = error.what();
    CHECK(what.starts_with("3 problems in " + path + ":"));
    CHECK(what.find(path + ":2: not JSON") != std::string::npos);
  }
}

TEST_CASE("a line of millions of tiny objects or strings is refused before it is built; big real records pass") {
  ScratchFolder folder;
  // Parsed, each "{}" would be a heap map (the whole line about 2 GB, 40
  // times its text); each "" a heap string.
  const auto line_of = [](const std::string& item, size_t bytes) {
    std::string line = "{\"x\":[";
    while (line.size() < bytes) line += item + ",";
    line.back() = ']';
    return line + "}";
  };
  std::string chat = "{\"messages\":[";
  for (int i = 0; i < 5000; ++i) chat += R"({"role":"user","content":"message )" + std::to_string(i) + "\"},";
  chat.back() = ']';
  std::string ids = "{\"input_ids\":[";
  for (int i = 0; i < 1'000'000; ++i) ids += std::to_string(i % 128000) + ",";
  ids.back() = ']';
  const std::string path = folder.write("wide.jsonl", "{\"a\":1}\n" + line_of("{}", 60'000'000) + "\n" + chat + "}\n" +
                                                         ids + "}\n" + line_of("\"\"", 60'000'000) + "\n{\"b\":2}\n");
  data::ProblemList problems(path, 10);
  const Read read = read_all(path, problems);
  CHECK(read.lines == std::vector<long long>{1, 3, 4, 6});
  REQUIRE(read.objects.size() == 4);
  CHECK(read.objects[1]["messages"].size() == 5000);
  CHECK(read.objects[2]["input_ids"].size() == 1'000'000);
  REQUIRE(problems.total() == 2);
  try {
    problems.throw_if_any();
    FAIL("expected DataError");
  } catch (const DataError& error) {
    const std::string limit = std::to_string(data::kMaxJsonlLineValues);
    CHECK(error.problems()[0].str() == path + ":2: more than " + limit +
                                           " arrays, objects and strings in one record (each is a separate allocation "
                                           "once parsed); split the record");
    CHECK(error.problems()[1].line == 5);
  }
}

TEST_CASE("a file of one JSON array gives its records, each located at the line its element starts on") {
  ScratchFolder folder;
  // Alpaca's layout (indented, one key per line), with strings holding what ends an element elsewhere.
  const std::string path = folder.write("alpaca.json",
                                        "\xEF\xBB\xBF\n  [\n  {\n    \"instruction\": \"a, b ] c\",\n"
                                        "    \"output\": \"}\\\" [x\"\n  },\n  {\"instruction\": \"two\", \"nested\": "
                                        "[[1, 2], {\"k\": \"]\"}]},\n  {\"instruction\": \"three\"}\n]\n\n");
  data::ProblemList problems(path, 10);
  const Read read = read_all(path, problems);
  CHECK(problems.empty());
  CHECK(read.non_blank == 3);
  CHECK(read.lines == std::vector<long long>{3, 7, 8});
  REQUIRE(read.objects.size() == 3);
  CHECK(read.objects[0]["instruction"] == "a, b ] c");
  CHECK(read.objects[0]["output"] == "}\" [x");
  CHECK(read.objects[1]["nested"][1]["k"] == "]");
  // The same records as JSON Lines read the same.
  std::string lines;
  for (const auto& object : read.objects) lines += object.dump() + "\n";
  data::ProblemList line_problems("lines", 10);
  CHECK(read_all(folder.write("same.jsonl", lines), line_problems).objects == read.objects);
  // An empty array is a file of no records.
  data::ProblemList empty_problems("e", 10);
  CHECK(read_all(folder.write("empty.json", " [ ] \n"), empty_problems).non_blank == 0);
  CHECK(empty_problems.empty());
}

TEST_CASE("JSON Lines whose first line is an array stay JSON Lines; a one-line array is an array") {
  ScratchFolder folder;
  const std::string lines = folder.write("lines.jsonl", "[1, 2]\n{\"a\": 2}\n");
  data::ProblemList problems(lines, 10);
  const Read read = read_all(lines, problems);
  CHECK(read.lines == std::vector<long long>{2});
  REQUIRE(problems.total() == 1);
  CHECK_THROWS_WITH_AS(problems.throw_if_any(), doctest::Contains(":1: expected a JSON object, got array"), DataError);
  const std::string one_line = folder.write("one.json", "[{\"a\": 1}, {\"a\": 2}]\n");
  data::ProblemList array_problems(one_line, 10);
  const Read array = read_all(one_line, array_problems);
  CHECK(array_problems.empty());
  CHECK(array.lines == std::vector<long long>{1, 1});
}

TEST_CASE("a malformed JSON array: each bad element located, the rest read; unclosed or trailing text reported") {
  ScratchFolder folder;
  const auto problems_of = [&](const std::string& name, const std::string& text, Read* out = nullptr) {
    const std::string path = folder.write(name, text);
    data::ProblemList problems(path, 20);
    const Read read = read_all(path, problems);
    if (out) *out = read;
    std::vector<std::string> messages;
    try {
      problems.throw_if_any();
    } catch (const DataError& error) {
      for (const auto& problem : error.problems()) messages.push_back(problem.str());
    }
    return messages;
  };
  Read read;
  const auto bad = problems_of("bad.json", "[{\"a\": 1},\n {\"a\": },\n 7,\n \"text\",\n {\"a\": 5}]", &read);
  CHECK(read.lines == std::vector<long long>{1, 5});
  REQUIRE(bad.size() == 3);
  CHECK(bad[0].find("bad.json:2: not JSON: ") != std::string::npos);
  CHECK(bad[1].ends_with("bad.json:3: expected a JSON object, got number"));
  CHECK(bad[2].ends_with("bad.json:4: expected a JSON object, got string"));
  const auto unclosed = problems_of("unclosed.json", "[{\"a\": 1},\n{\"a\": 2}\n");
  REQUIRE(unclosed.size() == 1);
  CHECK(unclosed[0].ends_with("unclosed.json:3: the JSON array is not closed (no ] at the end of the file)"));
  const auto cut = problems_of("cut.json", "[{\"a\": 1},\n{\"a\": \"no end");
  REQUIRE(cut.size() == 2);
  CHECK(cut[0].find("cut.json:2: not JSON") != std::string::npos);
  const auto trailing = problems_of("trailing.json", "[\n{\"a\": 1}\n]\n\n{\"a\": 2}\n");
  REQUIRE(trailing.size() == 1);
  CHECK(trailing[0].ends_with("trailing.json:5: text after the JSON array's closing ]"));
  const auto commas = problems_of("commas.json", "[{\"a\": 1},, {\"a\": 2} {\"a\": 3}]", &read);
  CHECK(read.objects.size() == 1);  // the last two run together: one element, not JSON
  REQUIRE(commas.size() == 2);
  CHECK(commas[0].ends_with("commas.json:1: not JSON: a comma without a record before it"));
  CHECK(commas[1].find("commas.json:1: not JSON: ") != std::string::npos);
  const auto last_comma = problems_of("last.json", "[{\"a\": 1},\n {\"a\": 2},\n]\n", &read);
  CHECK(read.objects.size() == 2);
  REQUIRE(last_comma.size() == 1);
  CHECK(last_comma[0].ends_with("last.json:3: not JSON: a comma before the closing ]"));
  CHECK(problems_of("empty.json", "[ ]\n").empty());
}

TEST_CASE("a JSON array file honours the read limit on records") {
  ScratchFolder folder;
  std::string text = "[";
  for (int i = 0; i < 10; ++i) text += (i ? ",\n" : "\n") + std::string("{\"i\": ") + std::to_string(i) + "}";
  const std::string path = folder.write("ten.json", text + "\n]\n");
  data::ProblemList problems(path, 10);
  bool truncated = false;
  std::vector<long long> lines;
  DataReadLimit limit;
  limit.max_lines = 4;
  limit.truncated = &truncated;
  CHECK(data::read_jsonl(path, problems, [&](long long line, const nlohmann::json&) { lines.push_back(line); },
                         limit) == 4);
  CHECK(truncated);
  CHECK(lines == std::vector<long long>{2, 3, 4, 5});
  CHECK(problems.empty());
}

TEST_CASE("Parquet, Arrow and compressed files are refused naming their format and how to convert them") {
  ScratchFolder folder;
  data::ProblemList problems("x", 10);
  const auto ignore = [](long long, const nlohmann::json&) {};
  const std::string parquet = folder.write("train.parquet", std::string("PAR1\x15\x04\x15\x00", 8) + "rest");
  const std::string parquet_message =
      parquet + ": is a Parquet file; meshrun reads JSON Lines or one JSON array of records: convert it, e.g. python3 -c";
  CHECK_THROWS_WITH_AS(data::read_jsonl(parquet, problems, ignore), doctest::Contains(parquet_message.c_str()),
                       DataError);
  CHECK_THROWS_WITH_AS(data::read_jsonl(folder.write("t.arrow", "ARROW1\0\0"), problems, ignore),
                       doctest::Contains("is an Arrow IPC file"), DataError);
  CHECK_THROWS_WITH_AS(data::read_jsonl(folder.write("t.jsonl.gz", std::string("\x1f\x8b\x08\x00", 4)), problems, ignore),
                       doctest::Contains("is gzip-compressed; decompress it first"), DataError);
  CHECK_THROWS_WITH_AS(data::read_jsonl(folder.write("t.jsonl.zst", "\x28\xb5\x2f\xfd rest"), problems, ignore),
                       doctest::Contains("is zstd-compressed"), DataError);
  CHECK_THROWS_WITH_AS(data::read_jsonl(folder.write("t.zip", "PK\x03\x04 rest"), problems, ignore),
                       doctest::Contains("is a zip archive"), DataError);
  // What iconv -t UTF-16 (or Windows' Notepad) writes: a byte-order mark, then two bytes a character.
  CHECK_THROWS_WITH_AS(data::read_jsonl(folder.write("u16.jsonl", std::string("\xff\xfe{\0\"\0", 6)), problems, ignore),
                       doctest::Contains("is UTF-16 text (its byte-order mark); meshrun reads UTF-8"), DataError);
  CHECK_THROWS_WITH_AS(data::read_jsonl(folder.write("u16be.jsonl", std::string("\xfe\xff\0{\0\"", 6)), problems, ignore),
                       doctest::Contains("is UTF-16 text"), DataError);
  // A file shorter than any magic is JSON Lines as before.
  data::ProblemList short_problems("s", 10);
  CHECK(data::read_jsonl(folder.write("s.jsonl", "{}"), short_problems, ignore) == 1);
}

TEST_CASE("a missing file or a folder is a DataError naming the path") {
  ScratchFolder folder;
  data::ProblemList problems("x", 10);
  const auto ignore = [](long long, const nlohmann::json&) {};
  const std::string missing = (folder.root() / "nope.jsonl").string();
  try {
    data::read_jsonl(missing, problems, ignore);
    FAIL("expected DataError");
  } catch (const DataError& error) {
    CHECK(error.total() == 1);
    CHECK(error.problems()[0].str() == missing + ": data file does not exist");
  }
  CHECK_THROWS_WITH_AS(data::read_jsonl(folder.root().string(), problems, ignore),
                       doctest::Contains("is a directory"), DataError);
  // A FIFO would block the open for ever: it is refused unopened.
  const std::string fifo = (folder.root() / "pipe.jsonl").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(data::read_jsonl(fifo, problems, ignore), doctest::Contains("is not a regular file"), DataError);
}

TEST_CASE("ProblemList keeps the first problems up to its limit and counts the rest") {
  data::ProblemList problems("f.jsonl", 2);
  for (int line = 1; line <= 5; ++line) problems.add(line, "k", "bad");
  CHECK(problems.total() == 5);
  try {
    problems.throw_if_any();
    FAIL("expected DataError");
  } catch (const DataError& error) {
    CHECK(error.total() == 5);
    REQUIRE(error.problems().size() == 2);
    CHECK(error.problems()[1].str() == "f.jsonl:2: key \"k\": bad");
    CHECK(std::string(error.what()).ends_with("\n  ... and 3 more"));
  }
}

TEST_CASE("DataProblem::str without a line or a key") {
  CHECK(DataProblem{"f", 0, "", "empty"}.str() == "f: empty");
  CHECK(DataProblem{"f", 7, "", "bad"}.str() == "f:7: bad");
  CHECK(DataProblem{"f", 7, "input", "missing"}.str() == "f:7: key \"input\": missing");
  CHECK_NOTHROW(data::ProblemList("f", 3).throw_if_any());
}

TEST_CASE("json_type_name") {
  CHECK(data::json_type_name(nlohmann::json(1)) == "number");
  CHECK(data::json_type_name(nlohmann::json(1.5)) == "number");
  CHECK(data::json_type_name(nlohmann::json(true)) == "boolean");
  CHECK(data::json_type_name(nlohmann::json(nullptr)) == "null");
  CHECK(data::json_type_name(nlohmann::json::array()) == "array");
  CHECK(data::json_type_name(nlohmann::json::object()) == "object");
  CHECK(data::json_type_name(nlohmann::json("s")) == "string");
}

}  // namespace
}  // namespace meshrun
