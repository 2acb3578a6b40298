#include <doctest/doctest.h>

#include <filesystem>

#include "src/hooks/folder_confinement.hpp"
#include "hook_test_support.hpp"

using meshrun::hooks_detail::confine_to_folder;
using meshrun::hooks_test::ScratchFolder;

TEST_CASE("paths are confined to the script folder") {
  ScratchFolder scratch;
  scratch.write("data/values.txt", "1\n");
  scratch.write_outside("secret.txt", "secret\n");
  const auto& folder = scratch.folder();
  std::string refusal;

  SUBCASE("relative paths are taken from the folder, not the working directory") {
    CHECK(confine_to_folder(folder, "data/values.txt", refusal) == folder / "data/values.txt");
    CHECK(confine_to_folder(folder, "data/../data/values.txt", refusal) ==
          folder / "data/values.txt");
    CHECK(confine_to_folder(folder, "new_file.txt", refusal) == folder / "new_file.txt");
  }
  SUBCASE("absolute paths inside the folder are fine") {
    CHECK(confine_to_folder(folder, (folder / "data/values.txt").string(), refusal) ==
          folder / "data/values.txt");
  }
  SUBCASE("leaving the folder lexically is refused") {
    CHECK_FALSE(confine_to_folder(folder, "../secret.txt", refusal));
    CHECK(refusal.starts_with("is outside the script folder"));
    CHECK_FALSE(confine_to_folder(folder, "data/../../secret.txt", refusal));
    CHECK_FALSE(confine_to_folder(folder, "/etc/passwd", refusal));
    CHECK_FALSE(confine_to_folder(folder, (folder.string() + "-sibling/x"), refusal));
  }
  SUBCASE("links inside the folder may point inside it") {
    std::filesystem::create_symlink(folder / "data/values.txt", folder / "alias.txt");
    CHECK(confine_to_folder(folder, "alias.txt", refusal) == folder / "data/values.txt");
  }
  SUBCASE("links pointing outside are refused, dangling ones and loops too") {
    std::filesystem::create_symlink(scratch.root() / "secret.txt", folder / "secret.txt");
    std::filesystem::create_symlink(scratch.root() / "not_yet.txt", folder / "dangling.txt");
    std::filesystem::create_symlink(folder / "loop_b", folder / "loop_a");
    std::filesystem::create_symlink(folder / "loop_a", folder / "loop_b");
    CHECK_FALSE(confine_to_folder(folder, "secret.txt", refusal));
    CHECK(refusal.find("through a symbolic link") != std::string::npos);
    CHECK_FALSE(confine_to_folder(folder, "dangling.txt", refusal));
    CHECK_FALSE(confine_to_folder(folder, "loop_a", refusal));
  }
  SUBCASE("empty paths and NUL bytes are refused") {
    CHECK_FALSE(confine_to_folder(folder, "", refusal));
    CHECK_FALSE(confine_to_folder(folder, std::string_view("a\0b", 3), refusal));
    CHECK(refusal == "contains a NUL byte");
  }
}
