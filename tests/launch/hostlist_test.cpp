#include <doctest/doctest.h>

#include "launch/launch_test_support.hpp"

namespace meshrun {
namespace {

using launch_test::launch_error;
using Hosts = std::vector<std::string>;

std::string hostlist_error(std::string_view hostlist) {
  return launch_error([&] { expand_hostlist(hostlist); });
}

TEST_CASE("plain host names pass through") {
  CHECK(expand_hostlist("gpu01") == Hosts{"gpu01"});
  CHECK(expand_hostlist("a,b,c") == Hosts{"a", "b", "c"});
  CHECK(expand_hostlist("node-1.cluster.example.org") == Hosts{"node-1.cluster.example.org"});
  CHECK(expand_hostlist("").empty());
}

TEST_CASE("ranges expand and keep the lower bound's zero padding") {
  CHECK(expand_hostlist("n[1-3]") == Hosts{"n1", "n2", "n3"});
  CHECK(expand_hostlist("n[008-011]") == Hosts{"n008", "n009", "n010", "n011"});
  CHECK(expand_hostlist("n[8-11]") == Hosts{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[98-101]") == Hosts{"n98", "n99", "n100", "n101"});
  CHECK(expand_hostlist("n[0-0]") == Hosts{"n0"});
  CHECK(expand_hostlist("n[7]") == Hosts{"n7"});
  CHECK(expand_hostlist("n[007]") == Hosts{"n007"});
}

TEST_CASE("commas inside brackets separate items, not hosts") {
  CHECK(expand_hostlist("gpu[01-04,07],login1") ==
        Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login1"});
  CHECK(expand_hostlist("a[1,3,5-6]") == Hosts{"a1", "a3", "a5", "a6"});
  CHECK(expand_hostlist("x[2],y,z[01-02]") == Hosts{"x2", "y", "z01", "z02"});
}

TEST_CASE("text after a bracket group is kept") {
  CHECK(expand_hostlist("a[1-2]b") == Hosts{"a1b", "a2b"});
  CHECK(expand_hostlist("[1-2]x") == Hosts{"1x", "2x"});
  CHECK(expand_hostlist("n[1-2].ib") == Hosts{"n1.ib", "n2.ib"});
}

TEST_CASE("several bracket groups expand as a product, the rightmost fastest") {
  CHECK(expand_hostlist("rack[1-2]-node[01-02]") ==
        Hosts{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"});
  CHECK(expand_hostlist("r[1,3]c[1-2]n[5]") == Hosts{"r1c1n5", "r1c2n5", "r3c1n5", "r3c2n5"});
  CHECK(expand_hostlist("login,r[1-2]n[1-2],gpu9") ==
        Hosts{"login", "r1n1", "r1n2", "r2n1", "r2n2", "gpu9"});
}

TEST_CASE("a malformed hostlist is refused with the reason and the place") {
  CHECK(hostlist_error("gpu[01-") ==
        "hostlist 'gpu[01-' is malformed: '[' at character 4 is never closed");
  CHECK(hostlist_error("gpu[5-3]") ==
        "hostlist 'gpu[5-3]' is malformed: range '5-3' at character 5 runs backwards");
  CHECK(hostlist_error("gpu]") ==
        "hostlist 'gpu]' is malformed: ']' at character 4 closes nothing");
  CHECK(hostlist_error("gpu[1[2]]") ==
        "hostlist 'gpu[1[2]]' is malformed: '[' at character 6 opens a group inside the group "
        "opened at character 4");
  CHECK(hostlist_error("gpu[]") == "hostlist 'gpu[]' is malformed: empty brackets at character 4");
  CHECK(hostlist_error("gpu[1,,2]") ==
        "hostlist 'gpu[1,,2]' is malformed: empty item in brackets at character 7");
  CHECK(hostlist_error("gpu[a-b]") ==
        "hostlist 'gpu[a-b]' is malformed: 'a-b' at character 5 is not a number or a range of "
        "numbers like 01-04");
  CHECK(
      hostlist_error("gpu[1-]").ends_with("'1-' at character 5 is not a number or a range of "
                                          "numbers like 01-04"));
  CHECK(
      hostlist_error("gpu[-3]").ends_with("'-3' at character 5 is not a number or a range of "
                                          "numbers like 01-04"));
  CHECK(hostlist_error("gpu[1-2-3]")
            .ends_with("'1-2-3' at character 5 is not a number or a "
                       "range of numbers like 01-04"));
  CHECK(hostlist_error("a,,b") ==
        "hostlist 'a,,b' is malformed: empty host name at character 3 (a comma at an end or two "
        "in a row)");
  CHECK(
      hostlist_error("a,").ends_with("empty host name at character 3 (a comma at an end or two "
                                     "in a row)"));
  CHECK(
      hostlist_error(",a").ends_with("empty host name at character 1 (a comma at an end or two "
                                     "in a row)"));
  CHECK(hostlist_error("a b") ==
        "hostlist 'a b' is malformed: whitespace at character 2 (hosts are separated by commas)");
}

TEST_CASE("a hostlist that would expand past any real cluster is refused") {
  CHECK(hostlist_error("n[0-99999999]") ==
        "hostlist 'n[0-99999999]' is malformed: the brackets holding '0-99999999' expand to more "
        "than 1048576 hosts");
  CHECK(hostlist_error("a[0-1023]b[0-1023]c[0-1]") ==
        "hostlist 'a[0-1023]b[0-1023]c[0-1]' is malformed: it expands to more than 1048576 hosts");
  CHECK(hostlist_error("n[0-99999999999999999999]")
            .ends_with("is not a number or a range of numbers like 01-04"));
}

TEST_CASE("a short hostlist whose names would fill GiBs is refused before allocating") {
  // Found while writing fuzz/launch_fuzz.cpp, which confirmed it
  // (fuzz/regressions/launch/long-names): 3 KB of SLURM_NODELIST expanded
  // to 3 GB of host names.
  const std::string long_name(3000, 'a');
  CHECK(hostlist_error(long_name + "[0-999999]").ends_with("is malformed: it expands to more than 64 MiB of host names"));
  CHECK(hostlist_error("n[" + std::string(3000, '0') + "-99999]")
            .ends_with("is malformed: it expands to more than 64 MiB of host names"));
  CHECK(hostlist_error(long_name + "[0-9999]," + long_name + "[0-9999]," + long_name + "[0-9999]")
            .ends_with("is malformed: it expands to more than 64 MiB of host names"));
  // A real cluster's list stays far below: a million 16-character names.
  CHECK(expand_hostlist("gpu-node-[0000000-1048575]").size() == 1048576);
}

}  // namespace
}  // namespace meshrun
