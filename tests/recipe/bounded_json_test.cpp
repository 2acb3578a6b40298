// JSON from users' files (include/meshrun/bounded_json.hpp): nesting bounded
// at parse time, quoted values bounded in length, integers never truncated;
// and read_bounded (include/meshrun/error.hpp) never waits on a FIFO.
#include <doctest/doctest.h>

#include <sys/stat.h>

#include <chrono>
#include <string>

#include "diagnostic_matchers.hpp"
#include "meshrun/bounded_json.hpp"
#include "meshrun/error.hpp"

namespace meshrun {
namespace {

std::string nested_arrays(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']'); }

TEST_CASE("parse_bounded_json takes nesting up to the bound and refuses one level more") {
  CHECK(parse_bounded_json(nested_arrays(kMaxJsonDepth)).is_array());
  CHECK_THROWS_WITH_AS(parse_bounded_json(nested_arrays(kMaxJsonDepth + 1)),
                       doctest::Contains("nested deeper than 128 levels"), nlohmann::json::parse_error);
  CHECK(parse_bounded_json(nested_arrays(kMaxJsonDepth + 1), /*allow_exceptions=*/false).is_discarded());
  // Objects count like arrays, and the refusal is the same for ordered JSON.
  std::string objects;
  for (int i = 0; i < 10; ++i) objects += "{\"a\":";
  objects += "1" + std::string(10, '}');
  CHECK(parse_bounded_json(objects, true, 10).is_object());
  CHECK_THROWS_AS(parse_bounded_json<nlohmann::ordered_json>(objects, true, 9), nlohmann::json::parse_error);
  // Text that is not JSON fails as json::parse fails.
  CHECK_THROWS_AS(parse_bounded_json("{\"a\":"), nlohmann::json::parse_error);
  CHECK(parse_bounded_json("[1,", false).is_discarded());
  CHECK(parse_bounded_json(R"({"a":[1,{"b":null}]})") == nlohmann::json::parse(R"({"a":[1,{"b":null}]})"));
}

TEST_CASE("a million levels of brackets are refused without building them (no stack overflow anywhere after)") {
  const std::string deep = nested_arrays(1'000'000);
  const auto start = std::chrono::steady_clock::now();
  CHECK(parse_bounded_json(deep, false).is_discarded());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("parse_bounded_json counts arrays, objects and strings against its bound; numbers are free") {
  const std::string text = R"([{}, {"a": 1}, "x\"[{", [], 2, null])";  // 1 + 1 + 2 + 1 + 1: six
  CHECK(json_shape(text, kMaxJsonDepth, 100).allocated_values == 6);
  CHECK(parse_bounded_json(text, true, kMaxJsonDepth, 6).size() == 6);
  CHECK_THROWS_WITH_AS(parse_bounded_json(text, true, kMaxJsonDepth, 5),
                       doctest::Contains("holds more than 5 arrays, objects and strings"), nlohmann::json::parse_error);
  CHECK(parse_bounded_json(text, false, kMaxJsonDepth, 5).is_discarded());
  std::string numbers = "[";
  for (int i = 0; i < 1'000'000; ++i) numbers += std::to_string(i) + ",";
  numbers.back() = ']';
  CHECK(parse_bounded_json(numbers, true, kMaxJsonDepth, 1).size() == 1'000'000);
}

TEST_CASE("millions of empty objects are refused by default before anything is built") {
  std::string text = "[";
  while (text.size() < 30'000'000) text += "{},";
  text.back() = ']';
  CHECK(json_shape(text, kMaxJsonDepth, SIZE_MAX).allocated_values > kMaxJsonAllocatedValues);
  CHECK_THROWS_WITH_AS(parse_bounded_json(text), doctest::Contains("arrays, objects and strings"),
                       nlohmann::json::parse_error);
}

TEST_CASE("json_excerpt bounds what a message quotes") {
  CHECK(json_excerpt(nlohmann::json::parse("[1,2]")) == "[1,2]");
  const std::string quoted = json_excerpt(nlohmann::json(std::string(1000, 'x')), 10);
  CHECK(quoted == "\"xxxxxxxxx...");
  // Invalid UTF-8 in a value is replaced, not thrown.
  CHECK(json_excerpt(nlohmann::json(std::string("\xff"))).size() > 0);
}

TEST_CASE("json_integer: integers in range, nothing else") {
  using nlohmann::json;
  CHECK(json_integer<int>(json(7)) == 7);
  CHECK(json_integer<int>(json(-7)) == -7);
  CHECK_FALSE(json_integer<int>(json(4.5)));
  CHECK_FALSE(json_integer<int>(json(4294967300LL)));  // not 4
  CHECK_FALSE(json_integer<int>(json::parse("1e30")));
  CHECK_FALSE(json_integer<int64_t>(json::parse("18446744073709551615")));  // not -1
  CHECK(json_integer<uint64_t>(json::parse("18446744073709551615")) == UINT64_MAX);
  CHECK_FALSE(json_integer<uint32_t>(json(-1)));
  CHECK(json_integer<int64_t>(json(INT64_MIN)) == INT64_MIN);
  CHECK_FALSE(json_integer<int>(json("3")));
}

TEST_CASE("read_bounded refuses a FIFO at once instead of waiting for a writer") {
  test::TempDir dir;
  const std::string fifo = (dir.path() / "pipe").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const auto start = std::chrono::steady_clock::now();
  const BoundedText read = read_bounded(fifo, 1024);
  CHECK(read.status == BoundedText::Status::not_a_file);
  CHECK(read.problem(1024) == "is a pipe or socket, not a file");
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

}  // namespace
}  // namespace meshrun
