#include <doctest/doctest.h>

#include "src/hooks/lua_message.hpp"
#include "meshrun/hooks/hooks.hpp"

using meshrun::HookError;
using meshrun::hooks_detail::locate_in_script;
using meshrun::hooks_detail::location_names_script;
using meshrun::hooks_detail::make_hook_error;

TEST_CASE("a location names the script by its path or by Lua's shortened tail") {
  const std::string long_path =
      "/a/very/long/path/that/goes/on/and/on/and/on/forever/and/ever/script.lua";
  CHECK(location_names_script("/s/hooks.lua", "/s/hooks.lua"));
  CHECK_FALSE(location_names_script("/s/other.lua", "/s/hooks.lua"));
  CHECK(location_names_script("...h/that/goes/on/and/on/and/on/forever/and/ever/script.lua",
                              long_path));
  CHECK_FALSE(location_names_script("...ever/other.lua", long_path));
  CHECK_FALSE(location_names_script("...", long_path));
  CHECK_FALSE(location_names_script("[C]", "/s/hooks.lua"));
}

TEST_CASE("the script's location prefixes are taken off the message") {
  auto located =
      locate_in_script("/s/hooks.lua:12: attempt to call a nil value", "", "/s/hooks.lua");
  CHECK(located.line == 12);
  CHECK(located.message == "attempt to call a nil value");

  located = locate_in_script("/s/hooks.lua:9: /s/hooks.lua:3: inner", "", "/s/hooks.lua");
  CHECK(located.line == 3);
  CHECK(located.message == "inner");

  located =
      locate_in_script("C:/odd:path/hooks.lua:4: colon in the path", "", "C:/odd:path/hooks.lua");
  CHECK(located.line == 4);
  CHECK(located.message == "colon in the path");
}

TEST_CASE("a message located elsewhere takes its line from the traceback") {
  const std::string traceback =
      "stack traceback:\n"
      "\t[C]: in function 'error'\n"
      "\t/s/lib/module.lua:2: in main chunk\n"
      "\t[C]: in function 'require'\n"
      "\t/s/hooks.lua:7: in function 'set_up'\n"
      "\t/s/hooks.lua:10: in main chunk\n"
      "\t[C]: ?";
  auto located = locate_in_script("/s/lib/module.lua:2: broken", traceback, "/s/hooks.lua");
  CHECK(located.line == 7);
  CHECK(located.message == "/s/lib/module.lua:2: broken");

  located = locate_in_script("no location at all", "", "/s/hooks.lua");
  CHECK(located.line == 0);
  CHECK(located.message == "no location at all");
}

TEST_CASE("a HookError reads as script, line, hook point and message") {
  const HookError with_traceback("/s/hooks.lua", 5, "reward", "boom", "stack traceback:\n\t...");
  CHECK(std::string(with_traceback.what()) ==
        "/s/hooks.lua:5: in hook point 'reward': boom\nstack traceback:\n\t...");
  const HookError without_line("/s/hooks.lua", 0, "load", "cannot open", "");
  CHECK(std::string(without_line.what()) == "/s/hooks.lua: in hook point 'load': cannot open");

  const HookError made = make_hook_error("/s/hooks.lua", "on_step", "/s/hooks.lua:3: bad step", "");
  CHECK(made.line() == 3);
  CHECK(made.hook_point() == "on_step");
  CHECK(made.message() == "bad step");
  CHECK(std::string(made.what()) == "/s/hooks.lua:3: in hook point 'on_step': bad step");
}
