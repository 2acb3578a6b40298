// Tests of src/data/jsonl_reader.cpp and data_error.cpp: line numbers,
// blank lines, byte order marks, located problems and their limit.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include "src/data/jsonl_reader.hpp"
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
                                           " arrays, objects and strings in one line (each is a separate allocation "
                                           "once parsed); split the record");
    CHECK(error.problems()[1].line == 5);
  }
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
