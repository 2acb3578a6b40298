// Tests of src/metrics/metrics_record.cpp: key order, value types, exact
// numbers, and null for what JSON cannot hold.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "meshrun/metrics/metrics.hpp"

namespace meshrun {
namespace {

TEST_CASE("step first, then keys in the order they were set; setting again replaces in place") {
  MetricsRecord record(12);
  record.set("loss", 0.5).set("lr", 1e-5).set("tokens", 4096).set("phase", "train").set("skipped", false);
  record.set("loss", 0.25);
  CHECK(record.to_json() == R"({"step":12,"loss":0.25,"lr":1e-05,"tokens":4096,"phase":"train","skipped":false})");
  CHECK(record.step() == 12);
  REQUIRE(record.find("tokens") != nullptr);
  CHECK(std::get<int64_t>(*record.find("tokens")) == 4096);
  CHECK(record.find("nope") == nullptr);
}

TEST_CASE("numbers are written with full precision and read back exactly") {
  const double values[] = {0.1, 1.0 / 3.0, 2.0 / 3.0 * 1e-300, 123456789.123456789, -7.0, 5e-324,
                           std::numeric_limits<double>::max(), 1.0 + std::numeric_limits<double>::epsilon()};
  for (const double value : values) {
    MetricsRecord record(0);
    record.set("x", value);
    const auto parsed = nlohmann::json::parse(record.to_json());
    CHECK(parsed["x"].get<double>() == value);
  }
  CHECK(json_number(0.1) == "0.1");
  CHECK(json_number(3.0) == "3");
  CHECK(json_number(1.0 / 3.0) == "0.3333333333333333");
  CHECK(json_number(-2.5e-8) == "-2.5e-08");
}

TEST_CASE("NaN and infinities are written as null") {
  MetricsRecord record(1);
  record.set("nan", std::nan("")).set("inf", std::numeric_limits<double>::infinity());
  record.set("ninf", -std::numeric_limits<float>::infinity());
  CHECK(record.to_json() == R"({"step":1,"nan":null,"inf":null,"ninf":null})");
  CHECK(json_number(std::nan("")) == "null");
}

TEST_CASE("integers of every width, floats and strings that need escaping") {
  MetricsRecord record(-1);
  record.set("a", static_cast<uint8_t>(200)).set("b", -3LL).set("c", 0.5f).set("d", std::string("q\"\n\\"));
  record.set("e\"key", true);
  record.set("big", static_cast<int64_t>(9007199254740993LL));
  CHECK(record.to_json() ==
        R"({"step":-1,"a":200,"b":-3,"c":0.5,"d":"q\"\n\\","e\"key":true,"big":9007199254740993})");
  MetricsRecord bad_text(0);
  bad_text.set("s", std::string("\xff"));
  CHECK_NOTHROW(nlohmann::json::parse(bad_text.to_json()));
}

TEST_CASE("an empty key or \"step\" is refused") {
  MetricsRecord record(0);
  CHECK_THROWS_AS(record.set("", 1), std::logic_error);
  CHECK_THROWS_AS(record.set("step", 1), std::logic_error);
  CHECK(record.to_json() == R"({"step":0})");
}

}  // namespace
}  // namespace meshrun
