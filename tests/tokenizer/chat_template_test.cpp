// The Jinja interpreter against Python's jinja2 configured like Hugging
// Face's apply_chat_template (render_templates.py): the real chat templates of
// Llama 3 Instruct, Llama 3.1 (tools), Qwen2 Instruct, Qwen2.5 (tools), Qwen3
// (tools and thinking), Mistral Instruct v0.1 and v0.3 (tools), DeepSeek-R1
// (namespace state, tool calls and outputs, thinking split off), Gemma 2
// (alternation enforced by raise_exception), Phi-3 Instruct, Llama 2 Chat,
// and a template exercising the rest of the subset,
// over several conversations; output must be byte-for-byte equal and a
// template error in Python must be one here too.
#include <doctest/doctest.h>

#include "meshrun/tokenizer/chat_template.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_test_support.hpp"

namespace meshrun {
namespace {

using json = nlohmann::ordered_json;
using test::TempDir;

json message(const char* role, const char* content) { return json{{"role", role}, {"content", content}}; }

std::vector<json> conversations() {
  json weather_tool = json::parse(R"({"type": "function", "function": {"name": "get_weather",
      "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string",
      "description": "City name"}, "days": {"type": "integer"}}, "required": ["city"]}, "return": {"type": "string"}}})");
  json tool_call = json::parse(R"({"id": "abc123xyz", "type": "function", "function": {"name": "get_weather",
      "arguments": {"city": "Paris", "days": 2}}})");
  std::vector<json> out;
  out.push_back({{"messages", {message("user", "Hi there!")}}, {"add_generation_prompt", true}});
  out.push_back({{"messages", {message("system", "You are terse."), message("user", "What is 2+2?"),
                               message("assistant", "4"), message("user", "And 3+3? stop")}},
                 {"add_generation_prompt", false}});
  out.push_back({{"messages", {message("user", "  spaced   \n"), message("assistant", " Café 日本 🙂\n\n"),
                               message("user", "Hi \"quoted\" 'single' \\ backslash\ttab")}},
                 {"add_generation_prompt", true}});
  out.push_back({{"messages", {message("user", "one"), message("user", "two")}}, {"add_generation_prompt", false}});
  out.push_back({{"messages", json::array()}, {"add_generation_prompt", true}});
  out.push_back({{"messages", {message("robot", "beep")}}, {"add_generation_prompt", false}});
  json with_tools = {{"messages", {message("system", "Use tools."), message("user", "Weather in Paris?")}},
                     {"tools", {weather_tool}},
                     {"add_generation_prompt", true}};
  out.push_back(with_tools);
  json tool_round = {{"messages", {message("user", "Weather in Paris?"),
                                   {{"role", "assistant"}, {"tool_calls", {tool_call}}},
                                   {{"role", "tool"}, {"tool_call_id", "abc123xyz"}, {"content", "sunny, 21°C"}},
                                   message("assistant", "It is sunny."), message("user", "Thanks")}},
                     {"tools", {weather_tool}},
                     {"add_generation_prompt", true}};
  out.push_back(tool_round);
  // OpenAI's wire form: content null beside the calls, arguments a JSON string (DeepSeek-R1's template
  // concatenates them), two tool outputs in a row.
  json string_call = tool_call;
  string_call["function"]["arguments"] = R"({"city": "Paris"})";
  out.push_back({{"messages", {message("user", "Weather in Paris?"),
                               {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {string_call, string_call}}},
                               {{"role", "tool"}, {"content", "sunny"}},
                               {{"role", "tool"}, {"content", "windy"}},
                               message("assistant", "<think>\nsum up\n</think>\n\nSunny and windy.")}},
                 {"add_generation_prompt", true}});
  // Thinking (Qwen3): reasoning as its own field, inside the content, in an
  // earlier turn (dropped) and in the last one; the thinking switch.
  out.push_back({{"messages", {message("user", "2+2?"),
                               {{"role", "assistant"}, {"reasoning_content", "\nAdd them.\n"}, {"content", "4"}},
                               message("user", "3+3?"),
                               message("assistant", "<think>\nAdd again.\n</think>\n\n6")}},
                 {"add_generation_prompt", false}});
  out.push_back({{"messages", {message("user", "Hi")}}, {"enable_thinking", false}, {"add_generation_prompt", true}});
  out.push_back({{"messages", {message("user", "Hi")}}, {"enable_thinking", true}, {"add_generation_prompt", true}});
  json parallel_tools = {{"messages", {message("user", "Weather in Paris and Rome?"),
                                       {{"role", "assistant"}, {"content", "Checking."},
                                        {"tool_calls", {tool_call, tool_call}}},
                                       {{"role", "tool"}, {"content", "sunny"}},
                                       {{"role", "tool"}, {"content", "rain"}}}},
                         {"tools", {weather_tool}},
                         {"add_generation_prompt", true}};
  out.push_back(parallel_tools);
  for (json& conversation : out) {
    conversation["bos_token"] = "<s>";
    conversation["eos_token"] = "</s>";
  }
  return out;
}

const char* const kTemplates[] = {"llama3_instruct.jinja",  "llama31_tools.jinja",     "qwen2_instruct.jinja",
                                  "qwen25_tools.jinja",     "qwen3.jinja",             "mistral_instruct.jinja",
                                  "mistral_v03_tools.jinja", "features.jinja",        "chatml_generation.jinja",
                                  "deepseek_r1.jinja",       "gemma2.jinja",            "phi3_instruct.jinja",
                                  "llama2_chat.jinja"};

TEST_CASE("chat templates render exactly like jinja2") {
  TempDir dir;
  json cases = json::array();
  for (const char* name : kTemplates)
    for (const json& variables : conversations())
      cases.push_back({{"template", test::tokenizer_test_dir() + "/templates/" + name}, {"variables", variables}});
  test::write_text(dir / "cases.json", cases.dump());
  REQUIRE(test::run_python("render_templates.py", test::quoted(dir / "cases.json") + " " +
                                                      test::quoted(dir / "expected.json")) == 0);
  const json expected = test::read_json(dir / "expected.json");
  REQUIRE(expected.size() == cases.size());
  size_t rendered = 0, refused = 0, marked_spans = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = cases[i]["template"].get<std::string>();
    CAPTURE(path);
    CAPTURE(cases[i]["variables"].dump());
    ChatTemplate chat(test::read_text(path), path);
    if (expected[i].contains("error")) {
      CAPTURE(expected[i]["error"].get<std::string>());
      CHECK_THROWS_AS(chat.render(cases[i]["variables"]), TokenizerError);
      ++refused;
    } else {
      MarkedChat marked;
      CHECK_NOTHROW(marked = chat.render_marked(cases[i]["variables"]));
      CHECK(marked.text == expected[i]["text"].get<std::string>());
      // Where {% generation %} wrote, as transformers' assistant mask tracks it.
      std::vector<std::pair<size_t, size_t>> spans;
      for (const json& span : expected[i]["generation"]) spans.emplace_back(span[0].get<size_t>(), span[1].get<size_t>());
      CHECK(marked.generation == spans);
      marked_spans += spans.size();
      ++rendered;
    }
  }
  // Both outcomes are exercised.
  CHECK(rendered > 30);
  CHECK(refused >= 5);
  CHECK(marked_spans >= 5);
}

TEST_CASE("raise_exception and template errors carry the message and line") {
  ChatTemplate mistral(test::read_text(test::tokenizer_test_dir() + "/templates/mistral_instruct.jinja"), "mistral");
  CHECK_THROWS_WITH_AS(mistral.render({{"assistant", "first"}}, false, "<s>", "</s>"),
                       "mistral: chat template line 1: raise_exception: Conversation roles must alternate "
                       "user/assistant/user/assistant/...",
                       TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("line one\n{{ messages | nosuchfilter }}", "t").render({}, false, "", ""),
                       "t: chat template line 2: unknown filter 'nosuchfilter'", TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("{% for x in y %}", "t"), test::contains("missing {% endfor %}"),
                       TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("{{ 'open }}", "t"), test::contains("unterminated string"), TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("\n\n{% frobnicate %}", "t"), "t: chat template line 3: unknown tag {% frobnicate %}",
                       TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("{{ undefined_thing.attr }}", "t").render({}, false, "", ""),
                       test::contains("'undefined_thing' is undefined"), TokenizerError);
  // Outside a loop (or in a macro defined inside one) break and continue
  // are Jinja2's compile errors; rendered, they silently cut the prompt.
  CHECK_THROWS_WITH_AS(ChatTemplate("a\n{% break %}{{ 'generation prompt' }}", "t"),
                       "t: chat template line 2: {% break %} outside a {% for %} loop", TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("{% if true %}{% continue %}{% endif %}", "t"),
                       test::contains("{% continue %} outside a {% for %} loop"), TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("{% for m in messages %}{% macro f() %}{% break %}{% endmacro %}{% endfor %}", "t"),
                       test::contains("{% break %} outside a {% for %} loop"), TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("{% for m in messages %}{% else %}{% break %}{% endfor %}", "t"),
                       test::contains("{% break %} outside a {% for %} loop"), TokenizerError);
  CHECK(ChatTemplate("{% for i in range(3) %}{% macro f() %}{% for j in range(2) %}{% break %}{% endfor %}{% endmacro %}"
                     "{% if i == 1 %}{% break %}{% endif %}{{ i }}{% endfor %}",
                     "t")
            .render({}, false, "", "") == "0");
}

TEST_CASE("hostile templates stop with an error, within bounded time and memory") {
  const auto render = [](const std::string& source) { return ChatTemplate(source, "evil").render({}, false, "", ""); };
  // A list that would not fit in memory is refused before it is built.
  CHECK_THROWS_WITH_AS(render("{% for i in range(2**40) %}x{% endfor %}"),
                       test::contains("range() of about 1099511627776 items"), TokenizerError);
  // Loops that multiply up run out of steps.
  CHECK_THROWS_WITH_AS(render("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"),
                       test::contains("steps (a huge or endless loop?)"), TokenizerError);
  // Endless macro recursion is a message, not a crash.
  CHECK_THROWS_WITH_AS(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
                       test::contains("macro 'f' calls nested deeper than 100"), TokenizerError);
  // Repetition is sized before it allocates; so is the output.
  CHECK_THROWS_WITH_AS(render("{{ 'ab' * 10**11 }}"), test::contains("a string of more than 32 MiB"), TokenizerError);
  CHECK_THROWS_WITH_AS(render("{{ [1, 2] * 10**9 }}"), test::contains("a list of more than"), TokenizerError);
  CHECK_THROWS_WITH_AS(render("{% for i in range(1000000) %}{{ 'abcdefghijklmnopqrstuvwxyz0123456789abcd' }}{% endfor %}"),
                       test::contains("a string of more than 32 MiB"), TokenizerError);
  CHECK_THROWS_WITH_AS(render("{% set s = 'x' * 1000000 %}{{ s.replace('x', s) }}"),
                       test::contains("a string of more than 32 MiB"), TokenizerError);
  CHECK_THROWS_WITH_AS(render("{{ messages | tojson(indent=1000000000) }}"), test::contains("tojson indent"),
                       TokenizerError);
  // Nesting deep enough to exhaust the parser's stack is refused while parsing.
  CHECK_THROWS_WITH_AS(ChatTemplate("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}", "evil"),
                       test::contains("nested deeper than 256 levels"), TokenizerError);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if true %}";
  CHECK_THROWS_WITH_AS(ChatTemplate(ifs, "evil"), test::contains("nested deeper than 256 levels"), TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("{{ " + std::string(100000, '-') + "1 }}", "evil"),
                       test::contains("nested deeper than 256 levels"), TokenizerError);
  // Within the bounds, the same constructs work.
  CHECK(render("{% for i in range(3) %}{{ i }}{% endfor %}{{ 'ab' * 2 }}") == "012abab");
}

std::string repeated(const std::string& piece, int times) {
  std::string out;
  for (int i = 0; i < times; ++i) out += piece;
  return out;
}

TEST_CASE("operator, postfix and filter chains are bounded while parsing, not by the stack") {
  const auto parse = [](const std::string& source) { ChatTemplate t(source, "evil"); };
  for (const std::string& chain : {"{{ 1" + repeated(" + 1", 20000) + " }}", "{{ x" + repeated("[0]", 20000) + " }}",
                                   "{{ x" + repeated("|trim", 20000) + " }}", "{{ x" + repeated(".a", 20000) + " }}",
                                   "{{ 1" + repeated(" ~ 1", 300000) + " }}", "{{ 1" + repeated(" and 1", 20000) + " }}",
                                   "{{ 1" + repeated(" or 1", 20000) + " }}", "{{ 2" + repeated(" ** 1", 20000) + " }}",
                                   "{{ 2" + repeated(" * 1", 20000) + " }}", "{{ f" + repeated("()", 20000) + " }}",
                                   "{{ x" + repeated(" is defined", 20000) + " }}",
                                   "{{ 1" + repeated(" if 1", 20000) + " }}"}) {
    CAPTURE(chain.substr(0, 20));
    CHECK_THROWS_WITH_AS(parse(chain), test::contains("nested deeper than 256 levels"), TokenizerError);
  }
  const auto render = [](const std::string& source) { return ChatTemplate(source, "t").render({}, false, "", ""); };
  CHECK(render("{{ 1" + repeated(" + 1", 200) + " }}") == "201");
  CHECK(render("{{ ' a '" + repeated("|trim", 200) + " }}") == "a");
}

TEST_CASE("nesting times macro recursion is bounded by one render depth, not the stack") {
  const auto render = [](const std::string& source) { return ChatTemplate(source, "evil").render({}, false, "", ""); };
  CHECK_THROWS_WITH_AS(render("{% macro f(n) %}{{ " + repeated("not ", 240) +
                              "(f(n+1) if n < 99 else 'x') }}{% endmacro %}{{ f(0) }}"),
                       test::contains("nested deeper than 1000 levels"), TokenizerError);
  CHECK(render("{% macro f(n) %}{{ (f(n+1) if n < 50 else 'x') }}{% endmacro %}{{ f(0) }}") == "x");
}

TEST_CASE("values nested at run time are released without recursion and walked with a bound") {
  const auto render = [](const std::string& source) { return ChatTemplate(source, "evil").render({}, false, "", ""); };
  // A million nested lists: released one at a time when the render ends.
  CHECK(render("{% set ns = namespace(x=[]) %}{% for i in range(700000) %}{% set ns.x = [ns.x] %}{% endfor %}ok") ==
        "ok");
  for (const char* use : {"{{ ns.x }}", "{{ ns.x | tojson }}", "{{ ns.x == ns.x }}", "{{ ns.x < ns.x }}"}) {
    CAPTURE(use);
    CHECK_THROWS_WITH_AS(render(std::string("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}"
                                            "{% set ns.x = [ns.x] %}{% endfor %}") + use),
                         test::contains("lists or dicts nested deeper than 512 levels"), TokenizerError);
  }
  // A namespace holding itself.
  CHECK_THROWS_WITH_AS(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"),
                       test::contains("nested deeper than 512 levels"), TokenizerError);
}

TEST_CASE("what a render creates is bounded in total, not only per value") {
  const auto render = [](const std::string& source) { return ChatTemplate(source, "evil").render({}, false, "", ""); };
  CHECK_THROWS_WITH_AS(render("{% set s = 'x' * 1000000 %}{% set l = [s] * 1000000 %}"),
                       test::contains("created more than 512 MiB"), TokenizerError);
  CHECK_THROWS_WITH_AS(render("{% set s = 'x' * 1000000 %}{{ ([[s]] * 1000000) | join }}"),
                       test::contains("a string of more than 32 MiB"), TokenizerError);
  CHECK_THROWS_WITH_AS(render("{% set s = 'x' * 1000000 %}{{ [[s]] * 1000000 }}"),
                       test::contains("a string of more than 32 MiB"), TokenizerError);
  CHECK_THROWS_WITH_AS(render("{% set s = 'x' * 1000000 %}{{ ([[s]] * 1000000) | tojson }}"),
                       test::contains("a string of more than 32 MiB"), TokenizerError);
  CHECK_THROWS_WITH_AS(render("{% set s = 'x' * 30000000 %}{% for i in range(1000000) %}{% set t = s ~ 'a' %}"
                              "{% endfor %}"),
                       test::contains("created more than 512 MiB"), TokenizerError);
}

TEST_CASE("a conversation past the string or list bounds is a template error, not an abort") {
  ChatTemplate t("{% for m in messages %}{{ m.content }}{% endfor %}", "t");
  json big = {{"messages", {{{"role", "user"}, {"content", std::string((32u << 20) + 1, 'a')}}}}};
  CHECK_THROWS_WITH_AS(t.render(big), test::contains("t: chat template a string of more than 32 MiB"), TokenizerError);
  json many = {{"messages", json::array()}};
  many["messages"].get_ref<json::array_t&>().resize((1u << 20) + 1, json(1));
  CHECK_THROWS_WITH_AS(t.render(many), test::contains("t: chat template a list of more than"), TokenizerError);
  // Escapes no UTF-8 text can hold are the template's error, at its line.
  CHECK_THROWS_WITH_AS(ChatTemplate("\n{{ '\\U7FFFFFFF' }}", "t"),
                       test::contains("t: chat template line 2: \\U7FFFFFFF is not a Unicode scalar value"),
                       TokenizerError);
  CHECK_THROWS_WITH_AS(ChatTemplate("{{ '\\ud800' }}", "t"), test::contains("\\ud800 is not a Unicode scalar value"),
                       TokenizerError);
  // A number past INT64_MAX keeps its magnitude.
  json huge = {{"n", 18446744073709551615ull}};
  CHECK(ChatTemplate("{{ n > 0 }}", "t").render(huge) == "True");
}

TEST_CASE("integer arithmetic past 64 bits is an error, never undefined behaviour or a hang") {
  // fuzz/jinja_fuzz.cpp found `*` overflowing (fuzz/regressions/jinja/mul-overflow);
  // the other operators and filters below had the same flaw, or looped once per
  // unit of a huge count (fuzz/regressions/jinja/*).
  const auto render = [](const std::string& source) { return ChatTemplate(source, "evil").render({}, false, "", ""); };
  const auto overflow = [&](const std::string& source, const std::string& message) {
    CAPTURE(source);
    CHECK_THROWS_WITH_AS(render(source), test::contains(message), TokenizerError);
  };
  overflow("{{ 3037000500 * 3037000500 }}", "line 1: integer overflow: 3037000500 * 3037000500 does not fit in 64 bits");
  overflow("{{ 9223372036854775807 + 1 }}", "integer overflow: 9223372036854775807 + 1");
  overflow("{{ -9223372036854775807 - 2 }}", "integer overflow: -9223372036854775807 - 2");
  overflow("{{ 2 ** 63 }}", "integer overflow: 2 ** 63");
  overflow("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow: -9223372036854775808 // -1");
  overflow("{{ -(-9223372036854775807 - 1) }}", "integer overflow: -9223372036854775808 * -1");
  overflow("{{ (-9223372036854775807 - 1) | abs }}", "abs(-9223372036854775808) does not fit in 64 bits");
  overflow("{{ 1e300 | int }}", "int(1e+300) does not fit in 64 bits");
  overflow("{% for i in range(-9223372036854775807 - 1, 9223372036854775807) %}{% endfor %}",
           "range() of about 18446744073709551615 items");
  // What fits gives Python's results, at once whatever the count.
  CHECK(render("{{ 2 ** 62 }} {{ 1 ** 99999999999999 }} {{ (-1) ** 99999999999999 }} {{ 0 ** 0 }}") ==
        "4611686018427387904 1 -1 1");
  CHECK(render("{{ (-9223372036854775807 - 1) % -1 }} {{ -7 // 2 }} {{ -7 % 2 }} {{ -2.9 | int }}") == "0 -4 1 -2");
  CHECK(render("[{{ '' * 999999999999999 }}] {{ ([] * 999999999999999) | length }}") == "[] 0");
  CHECK(render("{{ [1, 2].1 }} {{ [1, 2].99999999999999999999 is defined }}") == "2 False");
  CHECK(render("{{ range(9223372036854775806, 9223372036854775807, 10) | first }} "
               "{{ range(5, -9223372036854775807 - 1, -9223372036854775807 - 1) | last }}") ==
        "9223372036854775806 -9223372036854775803");
  CHECK(render("{{ 'abc'[1::9223372036854775807] }} {{ 'abcdef'[::-9223372036854775807 - 1] }}") == "b f");
}

TEST_CASE("only templates with {% generation %} blocks mark assistant text") {
  const std::string marked_source = test::read_text(test::tokenizer_test_dir() + "/templates/chatml_generation.jinja");
  ChatTemplate marked(marked_source, "chatml");
  CHECK(marked.marks_generation());
  const MarkedChat chat = marked.render_marked({{"user", "hi"}, {"assistant", "yo"}, {"user", "q"}, {"assistant", "é!"}},
                                               "", "");
  REQUIRE(chat.generation.size() == 2);
  CHECK(chat.text.substr(chat.generation[0].first, chat.generation[0].second - chat.generation[0].first) ==
        "yo<|im_end|>");
  CHECK(chat.text.substr(chat.generation[1].first, chat.generation[1].second - chat.generation[1].first) ==
        "é!<|im_end|>");
  // Inside a set block the output is captured, not the template's: untracked.
  ChatTemplate captured("{% set x %}{% generation %}a{% endgeneration %}{% endset %}{{ x }}", "t");
  CHECK(captured.marks_generation());
  CHECK(captured.render_marked({}, "", "").generation.empty());
  CHECK_FALSE(ChatTemplate(test::read_text(test::tokenizer_test_dir() + "/templates/qwen2_instruct.jinja"), "q")
                  .marks_generation());
}

TEST_CASE("a model directory's chat template is used by apply_chat_template") {
  TempDir dir;
  REQUIRE(test::run_python("make_bpe_tokenizer.py", "qwen2 " + test::quoted(dir / "qwen2")) == 0);
  auto tokenizer = load_tokenizer(dir / "qwen2");
  const std::string text = tokenizer->apply_chat_template({{"user", "Hi"}}, true);
  CHECK(text ==
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\n");
  // The template writes the special tokens; encoding finds them in the text.
  const auto ids = tokenizer->encode(text, false);
  CHECK(ids.front() == tokenizer->token_to_id("<|im_start|>"));
  CHECK(tokenizer->decode(ids) == text);
}

TEST_CASE("a model directory's tokenizer without a chat template refuses conversations, as transformers does") {
  TempDir dir;
  REQUIRE(test::run_python("make_bpe_tokenizer.py", "qwen2 " + test::quoted(dir / "qwen2")) == 0);
  nlohmann::json config = test::read_json(dir / "qwen2/tokenizer_config.json");
  config.erase("chat_template");
  test::write_text(dir / "qwen2/tokenizer_config.json", config.dump());
  std::filesystem::remove(dir / "qwen2/chat_template.jinja");
  auto tokenizer = load_tokenizer(dir / "qwen2");
  // Not the built-in format's "<|user|>" markers, which the model never saw.
  CHECK_THROWS_WITH_AS(tokenizer->apply_chat_template({{"user", "Hi"}}, true),
                       doctest::Contains("no chat template (tokenizer_config.json's chat_template or "
                                         "chat_template.jinja beside it)"),
                       TokenizerError);
  CHECK_THROWS_AS(tokenizer->render_chat(nlohmann::ordered_json{{"messages", nlohmann::ordered_json::array()}}, true),
                  TokenizerError);
  // Plain text is unaffected.
  CHECK(tokenizer->decode(tokenizer->encode("Hi", false)) == "Hi");
}

// transformers (4.47 on) saves the template to chat_template.jinja and
// prefers that file to tokenizer_config.json's chat_template when loading.
TEST_CASE("chat_template.jinja beside the tokenizer wins over tokenizer_config.json's template") {
  TempDir dir;
  REQUIRE(test::run_python("make_bpe_tokenizer.py", "qwen2 " + test::quoted(dir / "qwen2")) == 0);
  test::write_text(dir / "qwen2/chat_template.jinja",
                   "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
                   "{% if add_generation_prompt %}[assistant] {% endif %}");
  auto tokenizer = load_tokenizer(dir / "qwen2");
  CHECK(tokenizer->apply_chat_template({{"user", "Hi"}}, true) == "[user] Hi\n[assistant] ");
  // Without tokenizer_config.json the file still gives the template.
  std::filesystem::remove(dir / "qwen2/tokenizer_config.json");
  CHECK(load_tokenizer(dir / "qwen2")->apply_chat_template({{"user", "Hi"}}, false) == "[user] Hi\n");
  // Its errors name the file.
  test::write_text(dir / "qwen2/chat_template.jinja", "{% for m in messages %}");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir / "qwen2")->apply_chat_template({{"user", "Hi"}}, false),
                       test::contains("chat_template.jinja"), TokenizerError);
}

// A hub snapshot whose blob is missing leaves a dangling link: the file is
// there but unreadable, an error, not an absent file whose defaults (no chat
// template, no eos) would silently serve.
TEST_CASE("a tokenizer_config.json or chat_template.jinja that cannot be read is an error, not absent") {
  TempDir dir;
  REQUIRE(test::run_python("make_bpe_tokenizer.py", "qwen2 " + test::quoted(dir / "qwen2")) == 0);
  const std::filesystem::path config = dir / "qwen2/tokenizer_config.json";
  std::filesystem::remove(config);
  std::filesystem::create_symlink(dir / "blobs/missing", config);
  CHECK_THROWS_WITH_AS(load_tokenizer(dir / "qwen2"), test::contains("tokenizer_config.json at "), TokenizerError);
  CHECK_THROWS_WITH_AS(load_tokenizer(dir / "qwen2"), test::contains("cannot be read"), TokenizerError);
  std::filesystem::remove(config);
  std::filesystem::create_directory(config);
  CHECK_THROWS_WITH_AS(load_tokenizer(dir / "qwen2"), test::contains("cannot be read"), TokenizerError);
  std::filesystem::remove(config);
  std::filesystem::create_symlink(dir / "blobs/gone", dir / "qwen2/chat_template.jinja");
  CHECK_THROWS_WITH_AS(load_tokenizer(dir / "qwen2"), test::contains("chat_template.jinja at "), TokenizerError);
  std::filesystem::remove(dir / "qwen2/chat_template.jinja");
  CHECK(load_tokenizer(dir / "qwen2") != nullptr);  // absent: the defaults, as before
}

TEST_CASE("chat template variables reach every render, and the renderer's own names win") {
  TempDir dir;
  REQUIRE(test::run_python("make_bpe_tokenizer.py", "qwen2 " + test::quoted(dir / "qwen3")) == 0);
  // Qwen3's real template: enable_thinking = false writes an empty think block.
  auto config = test::read_json(dir / "qwen3/tokenizer_config.json");
  config["chat_template"] = test::read_text(test::tokenizer_test_dir() + "/templates/qwen3.jinja");
  test::write_text(dir / "qwen3/tokenizer_config.json", config.dump());
  auto tokenizer = load_tokenizer(dir / "qwen3");
  const std::vector<ChatMessage> chat = {{"user", "Hi"}};
  const std::string plain = tokenizer->apply_chat_template(chat, true);
  CHECK(plain.find("<think>") == std::string::npos);
  tokenizer->set_chat_template_variables({{"enable_thinking", false}, {"add_generation_prompt", false}});
  const std::string no_thinking = tokenizer->apply_chat_template(chat, true);
  CHECK(no_thinking == plain + "<think>\n\n</think>\n\n");
  CHECK(tokenizer->encode(no_thinking, false) != tokenizer->encode(plain, false));
  CHECK(tokenizer->render_chat({{"messages", {{{"role", "user"}, {"content", "Hi"}}}}}, true) == no_thinking);
  CHECK_THROWS_AS(tokenizer->set_chat_template_variables(nlohmann::ordered_json::array()), TokenizerError);
}

}  // namespace
}  // namespace meshrun
