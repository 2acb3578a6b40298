// tokenizer.json normalizers: the Unicode forms against Unicode's own
// conformance file (NormalizationTest.txt from Debian's unicode-data, the
// Unicode version utf8proc implements), each step's edge cases, and whole
// tokenizers with every normalizer compared id for id with Hugging Face's
// `tokenizers` package (the .venv's, scripts/setup.sh --test).
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <utf8proc.h>

#include "meshrun/tokenizer/tokenizer.hpp"
#include "src/tokenizer/normalizer.hpp"
#include "src/tokenizer/tokenizer_internal.hpp"
#include "src/tokenizer/utf8.hpp"
#include "tokenizer/tokenizer_test_support.hpp"

namespace meshrun {
namespace {

using json = nlohmann::ordered_json;
using test::TempDir;
using tokenizer_detail::Normalizer;
using tokenizer_detail::UnicodeForm;
using tokenizer_detail::unicode_normalize;

constexpr const char* kNormalizationTest = "/usr/share/unicode/NormalizationTest.txt.bz2";

std::string from_hex_list(const std::string& field) {
  std::string out;
  std::istringstream in(field);
  std::string hex;
  while (in >> hex) tokenizer_detail::append_utf8(out, static_cast<char32_t>(std::stoul(hex, nullptr, 16)));
  return out;
}

Normalizer normalizer_of(const json& config) { return Normalizer(nlohmann::json::parse(config.dump()), "test"); }

TEST_CASE("NFC, NFD, NFKC and NFKD pass Unicode's NormalizationTest.txt") {
  REQUIRE_MESSAGE(std::filesystem::exists(kNormalizationTest),
                  "unicode-data is not installed: run scripts/setup.sh --test");
  TempDir dir;
  const std::string text_path = dir / "NormalizationTest.txt";
  const std::string command = "/usr/bin/python3 -c 'import bz2, sys; open(sys.argv[2], \"wb\").write(bz2.open(sys.argv[1]).read())' " +
                              test::quoted(kNormalizationTest) + " " + test::quoted(text_path);
  REQUIRE(std::system(command.c_str()) == 0);
  const std::string text = test::read_text(text_path);
  // The file's Unicode version is the one utf8proc implements.
  CHECK(text.find("NormalizationTest-" + std::string(utf8proc_unicode_version()) + ".txt") != std::string::npos);

  std::istringstream lines(text);
  std::string line;
  bool in_part1 = false;
  std::vector<bool> listed_in_part1(0x110000, false);
  size_t cases = 0, failures = 0;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '@') {
      in_part1 = line.rfind("@Part1", 0) == 0;
      continue;
    }
    std::vector<std::string> c;
    std::istringstream fields(line);
    std::string field;
    for (int i = 0; i < 5 && std::getline(fields, field, ';'); ++i) c.push_back(from_hex_list(field));
    REQUIRE(c.size() == 5);
    if (in_part1) listed_in_part1[tokenizer_detail::to_code_points(c[0])[0]] = true;
    ++cases;
    auto expect = [&](UnicodeForm form, int source, int wanted) {
      if (unicode_normalize(c[static_cast<size_t>(source)], form) == c[static_cast<size_t>(wanted)]) return;
      if (++failures <= 10) FAIL_CHECK("line \"" << line << "\": form " << static_cast<int>(form) << " of c"
                                                 << source + 1 << " is not c" << wanted + 1);
    };
    for (int i : {0, 1, 2}) expect(UnicodeForm::nfc, i, 1), expect(UnicodeForm::nfd, i, 2);
    for (int i : {3, 4}) expect(UnicodeForm::nfc, i, 3), expect(UnicodeForm::nfd, i, 4);
    for (int i : {0, 1, 2, 3, 4}) expect(UnicodeForm::nfkc, i, 3), expect(UnicodeForm::nfkd, i, 4);
  }
  CHECK(cases > 18000);
  // Every code point that part 1 does not list is left alone by all four.
  size_t unlisted = 0;
  for (char32_t x = 0; x < 0x110000; ++x) {
    if ((x >= 0xD800 && x <= 0xDFFF) || listed_in_part1[x]) continue;
    std::string single;
    tokenizer_detail::append_utf8(single, x);
    ++unlisted;
    for (UnicodeForm form : {UnicodeForm::nfc, UnicodeForm::nfd, UnicodeForm::nfkc, UnicodeForm::nfkd})
      if (unicode_normalize(single, form) != single && ++failures <= 10)
        FAIL_CHECK("U+" << std::hex << static_cast<uint32_t>(x) << " changes under form " << static_cast<int>(form));
  }
  CHECK(unlisted > 1000000);
  CHECK(failures == 0);
}

TEST_CASE("normalizer steps behave as their namesakes in tokenizers") {
  SUBCASE("no normalizer leaves text as it is") {
    CHECK(Normalizer().empty());
    CHECK(Normalizer().apply("e\u0301 X") == "e\u0301 X");
    CHECK(normalizer_of(nullptr).empty());
  }
  SUBCASE("the four forms") {
    CHECK(normalizer_of({{"type", "NFC"}}).apply("cafe\u0301 \u212b") == "caf\u00e9 \u00c5");
    CHECK(normalizer_of({{"type", "NFD"}}).apply("caf\u00e9") == "cafe\u0301");
    CHECK(normalizer_of({{"type", "NFKC"}}).apply("\ufb01 \u2460 \uff76") == "fi 1 \u30ab");
    CHECK(normalizer_of({{"type", "NFKD"}}).apply("\u00bd \u00e9") == "1\u20442 e\u0301");
    CHECK(normalizer_of({{"type", "NFC"}}).apply(std::string("a\0b", 3)) == std::string("a\0b", 3));
  }
  SUBCASE("Lowercase maps code point by code point, U+0130 to two") {
    const Normalizer lower = normalizer_of({{"type", "Lowercase"}});
    CHECK(lower.apply("HeLLo") == "hello");
    CHECK(lower.apply("\u0130STANBUL") == "i\u0307stanbul");
    CHECK(lower.apply("\u03a3\u0391\u03a3") == "\u03c3\u03b1\u03c3");  // no final sigma
    CHECK(lower.apply("\u1e9e \u01c4 \u01c5") == "\u00df \u01c6 \u01c6");
  }
  SUBCASE("StripAccents drops every mark and decomposes nothing") {
    const Normalizer strip = normalizer_of({{"type", "StripAccents"}});
    CHECK(strip.apply("e\u0301 \u0915\u093e \u20dd!") == "e \u0915 !");
    CHECK(strip.apply("caf\u00e9") == "caf\u00e9");
  }
  SUBCASE("Strip removes White_Space at the chosen ends") {
    CHECK(normalizer_of({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}).apply("\u00a0 x y\u3000\n") ==
          "x y");
    CHECK(normalizer_of({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}).apply("  x  ") == "x  ");
    CHECK(normalizer_of({{"type", "Strip"}, {"strip_left", false}, {"strip_right", true}}).apply("  x  ") == "  x");
    CHECK(normalizer_of({{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}}).apply(" \t ").empty());
  }
  SUBCASE("Replace: literal, regex, and empty matches as Rust's find_iter") {
    CHECK(normalizer_of({{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}).apply("a b  c") ==
          "a\u2581b\u2581\u2581c");
    CHECK(normalizer_of({{"type", "Replace"}, {"pattern", {{"String", "a.b\\E("}}}, {"content", "X"}})
              .apply("a.b\\E( axb") == "X axb");
    CHECK(normalizer_of({{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}).apply("a \n\t b") ==
          "a b");
    const auto replace = [](const char* pattern, const char* text) {
      return normalizer_of({{"type", "Replace"}, {"pattern", {{"Regex", pattern}}}, {"content", "-"}}).apply(text);
    };
    CHECK(replace("b*", "abc") == "-a-c-");
    CHECK(replace("a|", "aab") == "--b-");
    CHECK(replace("(?=b)", "abc") == "a-bc");
    CHECK(replace("$", "ab") == "ab-");
    CHECK(replace("x*", "\u00e9\u65e5") == "-\u00e9-\u65e5-");  // steps over whole characters
  }
  SUBCASE("Prepend leaves empty text empty") {
    const Normalizer prepend = normalizer_of({{"type", "Prepend"}, {"prepend", "\u2581"}});
    CHECK(prepend.apply("ab") == "\u2581ab");
    CHECK(prepend.apply("").empty());
  }
  SUBCASE("a Sequence applies its steps in order, nested ones too") {
    const json bert_like = {{"type", "Sequence"},
                            {"normalizers", json::array({{{"type", "NFD"}},
                                                         {{"type", "Sequence"},
                                                          {"normalizers", json::array({{{"type", "StripAccents"}}})}},
                                                         {{"type", "Lowercase"}}})}};
    CHECK(normalizer_of(bert_like).apply("H\u00e9ll\u00f2 H\u00d4W") == "hello how");
  }
}

TEST_CASE("broken or unsupported normalizers are named") {
  auto error_of = [](const json& config) -> std::string {
    try {
      normalizer_of(config);
    } catch (const TokenizerError& error) {
      return error.what();
    }
    return "";
  };
  CHECK_THROWS_AS(normalizer_of({{"type", "BertNormalizer"}}), tokenizer_detail::UnsupportedTokenizerJson);
  CHECK(error_of({{"type", "Precompiled"}}).find("normalizer \"Precompiled\" is not supported") != std::string::npos);
  CHECK(error_of({{"kind", "NFC"}}).find("test: a normalizer without a string \"type\"") != std::string::npos);
  CHECK(error_of({{"type", "Sequence"}}).find("without a \"normalizers\" array") != std::string::npos);
  CHECK(error_of({{"type", "Replace"}, {"content", "x"}}).find("Replace without a pattern") != std::string::npos);
  CHECK(error_of({{"type", "Replace"}, {"pattern", {{"String", "a"}}}}).find("without a string \"content\"") !=
        std::string::npos);
  CHECK(error_of({{"type", "Replace"}, {"pattern", {{"Regex", "(unclosed"}}}, {"content", ""}})
            .find("test: the normalizer Replace regex does not compile") != std::string::npos);
  CHECK(error_of({{"type", "Prepend"}, {"prepend", 3}}).find("without a string \"prepend\"") != std::string::npos);
  json nested = {{"type", "NFC"}};
  for (int i = 0; i < 40; ++i) nested = {{"type", "Sequence"}, {"normalizers", json::array({nested})}};
  CHECK(error_of(nested).find("nested deeper than") != std::string::npos);
}

// The reference's Python: the .venv's, where scripts/setup.sh --test put
// the `tokenizers` package.
int run_hf_reference(const std::string& args) {
  const std::string command = std::string(MESHRUN_TORCH_PYTHON) + " " +
                              test::quoted(test::tokenizer_test_dir() + "/hf_tokenizers_reference.py") + " " + args;
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("a normalizer regex cannot split a character, and no step loops on one") {
  // \C matches one byte of "à": refused when the tokenizer loads.
  const json split_byte = {{"type", "Replace"}, {"pattern", {{"Regex", "^\\C"}}}, {"content", ""}};
  CHECK_THROWS_WITH_AS(normalizer_of(split_byte), doctest::Contains("the normalizer Replace regex does not compile"),
                       TokenizerError);
  // Should a step ever see a broken byte, the code-point walks still advance.
  const std::string broken = "\xC3 A\xC3";
  CHECK(normalizer_of({{"type", "Strip"}}).apply(broken) == broken);
  CHECK(normalizer_of({{"type", "Lowercase"}}).apply(broken) == "\xEF\xBF\xBD a\xEF\xBF\xBD");
  CHECK(normalizer_of({{"type", "StripAccents"}}).apply(broken) == "\xEF\xBF\xBD A\xEF\xBF\xBD");
}

TEST_CASE("a normalizer that multiplies the text is stopped with an error naming the file") {
  json doubling = {{"type", "Sequence"}, {"normalizers", json::array()}};
  for (int i = 0; i < 40; ++i)
    doubling["normalizers"].push_back({{"type", "Replace"}, {"pattern", {{"Regex", ""}}}, {"content", "a"}});
  CHECK_THROWS_WITH_AS(normalizer_of(doubling).apply(std::string(100, 'b')),
                       doctest::Contains("test: the normalizer turns 100 bytes into more than 2624"), TokenizerError);
  // A bounded growth (one 3-byte "▁" per space) is fine.
  const json spaces = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
  CHECK(normalizer_of(spaces).apply(std::string(10000, ' ')).size() == 30000);
}

TEST_CASE("tokenizers with each normalizer agree with Hugging Face's tokenizers id for id") {
  TempDir dir;
  const std::string base = dir / "qwen2";
  REQUIRE(test::run_python("make_bpe_tokenizer.py", "qwen2 " + test::quoted(base)) == 0);
  const json tokenizer = test::read_json(base + "/tokenizer.json");
  auto step = [](const char* type) { return json{{"type", type}}; };
  auto sequence = [](json list) { return json{{"type", "Sequence"}, {"normalizers", std::move(list)}}; };
  const std::vector<json> normalizers = {
      step("NFC"), step("NFD"), step("NFKC"), step("NFKD"), step("Lowercase"), step("StripAccents"),
      sequence({step("NFD"), step("StripAccents"), step("Lowercase")}),
      sequence({{{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}},
                {{"type", "Replace"}, {"pattern", {{"Regex", "\\s+"}}}, {"content", " "}}, step("Lowercase")}),
      sequence({{{"type", "Prepend"}, {"prepend", "\u2581"}},
                {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}}),
      {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
      {{"type", "Replace"}, {"pattern", {{"Regex", "o+|[A-Z]\\s"}}}, {"content", "0"}},
      sequence({sequence({step("NFKD")}), step("Lowercase"), step("NFC")}),
  };
  std::vector<std::string> dirs;
  std::string args = test::quoted(dir / "reference.json");
  for (size_t i = 0; i < normalizers.size(); ++i) {
    json variant = tokenizer;
    variant["normalizer"] = normalizers[i];
    // A token matched after normalizing, by its normalized text.
    const int id = static_cast<int>(variant["added_tokens"].back()["id"].get<int>()) + 1;
    variant["added_tokens"].push_back({{"id", id}, {"content", "<Mask>"}, {"single_word", false}, {"lstrip", false},
                                       {"rstrip", false}, {"normalized", true}, {"special", false}});
    dirs.push_back(dir / ("normalizer" + std::to_string(i)));
    std::filesystem::create_directories(dirs.back());
    test::write_text(dirs.back() + "/tokenizer.json", variant.dump());
    std::filesystem::copy_file(base + "/tokenizer_config.json", dirs.back() + "/tokenizer_config.json");
    args += " " + test::quoted(dirs.back());
  }
  REQUIRE_MESSAGE(run_hf_reference(args) == 0, "the tokenizers package is missing: run scripts/setup.sh --test");
  const json reference = test::read_json(dir / "reference.json");
  for (size_t i = 0; i < dirs.size(); ++i) {
    CAPTURE(normalizers[i].dump());
    auto meshrun_tokenizer = load_tokenizer(dirs[i]);
    size_t mismatches = 0;
    for (const auto& c : reference[dirs[i]]) {
      const std::string text = c["text"].get<std::string>();
      const auto ids = meshrun_tokenizer->encode(text, false);
      const auto expected = c["ids"].get<std::vector<int32_t>>();
      if (ids != expected && ++mismatches <= 3) {
        CAPTURE(text);
        CHECK(nlohmann::json(ids).dump() == nlohmann::json(expected).dump());
      }
      if (meshrun_tokenizer->decode(expected) != c["decoded"].get<std::string>() && ++mismatches <= 3)
        CHECK(meshrun_tokenizer->decode(expected) == c["decoded"].get<std::string>());
    }
    CHECK(mismatches == 0);
  }
}

}  // namespace
}  // namespace meshrun
