// Tests of src/recipe/schema_markdown.cpp: docs/recipes.md is the generated
// reference, and it documents every key, section and rule.
#include <doctest/doctest.h>

#include <algorithm>

#include "diagnostic_matchers.hpp"
#include "meshrun/lint/lint.hpp"
#include "meshrun/recipe/rules.hpp"
#include "meshrun/recipe/schema.hpp"

namespace meshrun {
namespace {

const std::string kDocsPath = std::string(MESHRUN_SOURCE_DIR) + "/docs/recipes.md";

// The lines of `text` from the "## " heading `heading` up to the next one.
std::string section_text(const std::string& text, const std::string& heading) {
  size_t begin = text.find("\n## " + heading + "\n");
  if (begin == std::string::npos) return {};
  size_t end = text.find("\n## ", begin + 1);
  return text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

TEST_CASE("docs/recipes.md is the output of schema_markdown()") {
  const std::string generated = schema_markdown(rule_catalog());
  const std::string on_disk = test::read_file(kDocsPath);
  REQUIRE_MESSAGE(!on_disk.empty(), kDocsPath << " is missing: run `meshrun docs recipes > docs/recipes.md`");
  if (on_disk != generated) {
    // Name the first line that differs rather than printing both documents.
    size_t at = 0;
    while (at < on_disk.size() && at < generated.size() && on_disk[at] == generated[at]) ++at;
    size_t line_start = on_disk.rfind('\n', at == 0 ? 0 : at - 1);
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    const int line = static_cast<int>(std::count(on_disk.begin(), on_disk.begin() + line_start, '\n')) + 1;
    auto line_of = [&](const std::string& text) { return text.substr(line_start, text.find('\n', line_start) - line_start); };
    FAIL_CHECK("docs/recipes.md is out of date at line " << line << ":\n  file:      " << line_of(on_disk)
                                                         << "\n  generated: " << line_of(generated)
                                                         << "\nregenerate it with `meshrun docs recipes > docs/recipes.md`");
  }
}

TEST_CASE("every key appears in the table of its section") {
  const std::string markdown = schema_markdown(rule_catalog());
  const Schema& schema = recipe_schema();
  for (const auto& key : schema.keys) {
    size_t dot = key.path.rfind('.');
    std::string parent = dot == std::string::npos ? "" : key.path.substr(0, dot);
    std::string name = key.path.substr(dot == std::string::npos ? 0 : dot + 1);
    std::string heading = parent.empty() ? "Top level" : "[" + parent + "]";
    for (size_t star = heading.find('*'); star != std::string::npos; star = heading.find('*'))
      heading.replace(star, 1, "NAME");
    const std::string section = section_text(markdown, heading);
    INFO("key " << key.path << " under ## " << heading);
    REQUIRE_FALSE(section.empty());
    CHECK(section.find("\n| `" + name + "` | " +
                         (key.type_text.empty() ? std::string(value_type_name(key.type)) : key.type_text) + " | ") != std::string::npos);
  }
}

TEST_CASE("a key's row shows its default, constraint, required flag and the rules that read it") {
  const std::string markdown = schema_markdown(rule_catalog());
  CHECK(markdown.find("| `nodes` | integer | 1 | Number of nodes (machines) in the job. | ≥ 1; `launch.local-nodes`; "
                      "`roles.placement`; `roles.fit` |") != std::string::npos);
  // A table-backed choice documents each row.
  CHECK(markdown.find("| `algorithm` | string | none (required) | What to train. `sft`: Supervised fine-tuning on "
                      "prompt/response pairs or chats; the loss covers the response (in chats, the assistant turns "
                      "data.loss_turns names). `ppo`: ") != std::string::npos);
  CHECK(markdown.find("required; one of \"sft\", \"ppo\", \"dpo\", \"rm\"; `schema.required`; `mesh.sp-unsupported`; "
                      "`roles.unused`; `dpo.packing`; `data.label-unused`; `data.loss-turns-unused`; `data.eval-unsupported`; "
                      "`lora.unsupported`; `env.needs-rollouts` |") != std::string::npos);
  CHECK(section_text(markdown, "[roles.NAME.mesh]").find("| `dp` | integer | -1 |") != std::string::npos);
}

TEST_CASE("every section has a heading with its documentation, and every rule a row") {
  const std::string markdown = schema_markdown(rule_catalog());
  CHECK(markdown.rfind("# Recipe reference\n", 0) == 0);
  for (const auto& section : recipe_schema().sections) {
    std::string heading = section.path.empty() ? "Top level" : "[" + section.path + "]";
    for (size_t star = heading.find('*'); star != std::string::npos; star = heading.find('*'))
      heading.replace(star, 1, "NAME");
    INFO("section " << heading);
    CHECK(section_text(markdown, heading).find("\n\n" + section.doc + "\n\n") != std::string::npos);
  }
  const std::string rules = section_text(markdown, "Rules");
  REQUIRE_FALSE(rules.empty());
  for (const RuleRow* rule : rule_catalog()) {
    INFO("rule " << rule->id);
    CHECK(rules.find("\n| `" + rule->id + "` | ") != std::string::npos);
  }
}

TEST_CASE("table cells escape the pipe character") {
  // No row of the generated tables may have more cells than its header.
  const std::string markdown = schema_markdown(rule_catalog());
  size_t start = 0;
  while (start < markdown.size()) {
    size_t end = markdown.find('\n', start);
    if (end == std::string::npos) end = markdown.size();
    const std::string line = markdown.substr(start, end - start);
    if (line.rfind("| ", 0) == 0) {
      int cells = 0;
      for (size_t i = 0; i < line.size(); ++i)
        if (line[i] == '|' && (i == 0 || line[i - 1] != '\\')) ++cells;
      INFO(line);
      CHECK((cells == 6 || cells == 3));  // 5 columns for keys, 2 for rules
    }
    start = end + 1;
  }
}

}  // namespace
}  // namespace meshrun
