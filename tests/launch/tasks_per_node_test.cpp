#include <doctest/doctest.h>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_error;
using Counts = std::vector<int>;

std::string tasks_error(std::string_view tasks_per_node) {
  return launch_error([&] { expand_tasks_per_node(tasks_per_node); });
}

TEST_CASE("task counts expand one entry per node") {
  CHECK(expand_tasks_per_node("2") == Counts{2});
  CHECK(expand_tasks_per_node("4(x2),3") == Counts{4, 4, 3});
  CHECK(expand_tasks_per_node("1(x3)") == Counts{1, 1, 1});
  CHECK(expand_tasks_per_node("8,8") == Counts{8, 8});
  CHECK(expand_tasks_per_node("2,4(x1),1(x2)") == Counts{2, 4, 1, 1});
  CHECK(expand_tasks_per_node("16(x128)").size() == 128);
}

TEST_CASE("malformed task counts are refused with the entry named") {
  const std::string expected = " (expected counts like \"4(x2),3\")";
  CHECK(tasks_error("4(x)") ==
        "tasks-per-node list '4(x)' is malformed: entry '4(x)' needs a "
        "repeat count of 1 or more in (xN)" +
            expected);
  CHECK(tasks_error("(x2)") ==
        "tasks-per-node list '(x2)' is malformed: entry '(x2)' has no task count before '('" +
            expected);
  CHECK(tasks_error("") == "tasks-per-node list '' is malformed: it is empty" + expected);
  CHECK(tasks_error("4(x0)").ends_with("entry '4(x0)' needs a repeat count of 1 or more in (xN)" +
                                       expected));
  CHECK(tasks_error("4(2)").ends_with("entry '4(2)' has a repeat that is not of the form (xN)" +
                                      expected));
  CHECK(tasks_error("4(x2").ends_with("entry '4(x2' has a repeat that is not of the form (xN)" +
                                      expected));
  CHECK(tasks_error("4(x2)1").ends_with("entry '4(x2)1' has a repeat that is not of the form (xN)" +
                                        expected));
  CHECK(tasks_error("4(").ends_with("entry '4(' has a repeat that is not of the form (xN)" +
                                    expected));
  CHECK(tasks_error("0").ends_with("entry '0' does not start with a task count of 1 or more" +
                                   expected));
  CHECK(tasks_error("four").ends_with("entry 'four' does not start with a task count of 1 or more" +
                                      expected));
  CHECK(tasks_error("-1").ends_with("entry '-1' does not start with a task count of 1 or more" +
                                    expected));
  CHECK(tasks_error("4,,3").ends_with("an empty entry (a comma at an end or two in a row)" +
                                      expected));
  CHECK(
      tasks_error("4,").ends_with("an empty entry (a comma at an end or two in a row)" + expected));
}

TEST_CASE("a repeat past any real cluster is refused") {
  CHECK(tasks_error("1(x2000000)")
            .ends_with("it has more than 1048576 nodes (expected counts "
                       "like \"4(x2),3\")"));
  CHECK(tasks_error("1(x99999999999)")
            .ends_with("it has more than 1048576 nodes (expected counts like \"4(x2),3\")"));
  CHECK(tasks_error("99999999999")
            .ends_with(
                "entry '99999999999' has a task count too large for any node (expected counts like "
                "\"4(x2),3\")"));
}

}  // namespace
}  // namespace meshrun
