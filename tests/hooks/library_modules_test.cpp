#include <doctest/doctest.h>

#include <filesystem>
#include <set>

#include "src/hooks/embedded_lua.hpp"
#include "hook_batch_test_support.hpp"
#include "meshrun/hooks/hook_batch.hpp"

using meshrun::call_reward_hook;
using meshrun::HookBatch;
using meshrun::HookError;
using meshrun::HookOptions;
using meshrun::HookScript;
using meshrun::hooks_detail::library_modules;
using meshrun::hooks_test::fixture;
using meshrun::hooks_test::hook_failure;
using meshrun::hooks_test::script_in;
using meshrun::hooks_test::SyntheticBatch;
using meshrun::test::TempDir;

namespace {

HookOptions with_sandbox(bool sandbox) {
  HookOptions options;
  options.sandbox = sandbox;
  return options;
}

}  // namespace

TEST_CASE("every file of lua/meshrun is embedded under its module name") {
  std::set<std::string> on_disk;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(MESHRUN_SOURCE_DIR) + "/lua/meshrun")) {
    if (entry.path().extension() == ".lua") on_disk.insert(entry.path().stem().string());
  }
  std::set<std::string> embedded;
  for (const auto& module : library_modules()) {
    CHECK(module.module.starts_with("meshrun."));
    CHECK(module.origin == "lua/meshrun/" + std::string(module.module.substr(8)) + ".lua");
    embedded.insert(std::string(module.module.substr(8)));
  }
  CHECK(embedded == on_disk);
  CHECK(embedded.count("json") == 1);
  CHECK(embedded.count("reward") == 1);
}

TEST_CASE("each library module can be required with and without a sandbox") {
  for (const auto& module : library_modules()) {
    for (const bool sandbox : {true, false}) {
      CAPTURE(module.module);
      CAPTURE(sandbox);
      TempDir folder;
      const std::string name(module.module);
      CHECK_NOTHROW(script_in(folder, "requires.lua",
                              "local m = require('" + name +
                                  "')\n"
                                  "assert(type(m) == 'table', type(m))\n"
                                  "assert(require('" +
                                  name + "') == m, 'loaded twice')\n",
                              with_sandbox(sandbox)));
    }
  }
}

TEST_CASE("the library comes before a module of the same name in the script's folder") {
  TempDir folder;
  folder.write("meshrun/json.lua", "return 'the folder copy'\n");
  CHECK_NOTHROW(script_in(folder, "shadowed.lua",
                          "assert(type(require('meshrun.json').encode) == 'function')\n"));
}

TEST_CASE("an unknown meshrun module is looked for in the folder, and not found") {
  TempDir folder;
  const HookError error = hook_failure(
      [&] { script_in(folder, "unknown.lua", "local nope = require('meshrun.nope')\n"); });
  CHECK(error.line() == 1);
  CHECK(error.message().starts_with("module 'meshrun.nope' not found"));
}

TEST_CASE("library modules run inside the sandbox of a sandboxed script") {
  TempDir folder;
  // The module sees the sandbox's globals: a change the script makes to its
  // own string table is visible to the module loaded after it.
  CHECK_NOTHROW(script_in(folder, "environment.lua",
                          "string.format = function() return 'sandbox copy' end\n"
                          "local ok, message = pcall(require('meshrun.reward').clamp, 1, 2, 0)\n"
                          "assert(not ok and message:find('sandbox copy'), message)\n"));
}

TEST_CASE("meshrun.json encodes values as JSON") {
  for (const bool sandbox : {true, false}) {
    CAPTURE(sandbox);
    CHECK_NOTHROW(HookScript::load(fixture("library/json_cases.lua"), with_sandbox(sandbox)));
  }
}

TEST_CASE("meshrun.json decodes JSON, bounded, and names where bad text goes wrong") {
  for (const bool sandbox : {true, false}) {
    CAPTURE(sandbox);
    CHECK_NOTHROW(HookScript::load(fixture("library/json_decode_cases.lua"), with_sandbox(sandbox)));
  }
}

TEST_CASE("meshrun.reward helpers") {
  auto script = HookScript::load(fixture("library/reward_helpers.lua"), {});
  SyntheticBatch data;

  SUBCASE("response lengths from response_len, else from response_mask") {
    HookBatch batch = data.batch();
    data.response_len = {5, 6, 7, 8};  // disagrees with the mask on purpose
    CHECK(call_reward_hook(*script, "lengths", batch) == std::vector<double>{5, 6, 7, 8});
    std::erase_if(batch.arrays, [](const auto& array) { return array.name == "response_len"; });
    CHECK(call_reward_hook(*script, "lengths", batch) == std::vector<double>{3, 6, 9, 12});
    std::erase_if(batch.arrays, [](const auto& array) { return array.name == "response_mask"; });
    const HookError error = hook_failure([&] { call_reward_hook(*script, "lengths", batch); });
    CHECK(error.message() ==
          "meshrun.reward.response_lengths: the batch has neither response_len nor "
          "response_mask");
    CHECK(error.line() == 7);
  }
  SUBCASE("per_sample and clamp") {
    CHECK(call_reward_hook(*script, "per_sample", data.batch()) ==
          std::vector<double>{10.5, 13, 9, 12.25});
    const HookError error =
        hook_failure([&] { call_reward_hook(*script, "bad_score", data.batch()); });
    CHECK(error.message() ==
          "meshrun.reward.per_sample: the score of sample 3 is high, expected a finite number");
    CHECK(error.line() == 20);
  }
  SUBCASE("group_means") {
    CHECK(call_reward_hook(*script, "group_means", data.batch()) ==
          std::vector<double>{2, 2, 15, 15});
    const HookError error =
        hook_failure([&] { call_reward_hook(*script, "uneven_groups", data.batch()); });
    CHECK(error.message() == "meshrun.reward.group_means: 4 values do not split into groups of 3");
    CHECK(error.line() == 33);
  }
}
