// Safetensors: round trips in every float dtype, sharded directories, and
// malformed files, each a SafetensorsError naming the file and the tensor.
#include "tests/dist/torch_doctest.hpp"

#include <sys/stat.h>

#include <chrono>
#include <cstring>

#include <nlohmann/json.hpp>

#include "meshrun/model/safetensors.hpp"
#include "model_fixtures.hpp"

using namespace meshrun;
using model_test::TempDir;

namespace {

// A file with the given header text and `data_bytes` zero bytes after it.
std::string raw_file(const std::string& header, size_t data_bytes, uint64_t declared_length = UINT64_MAX) {
  const uint64_t length = declared_length == UINT64_MAX ? header.size() : declared_length;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\0');
}

void check_rejected(const TempDir& dir, const std::string& contents, const std::string& expected) {
  const auto path = dir.write("bad.safetensors", contents);
  try {
    SafetensorsFile file(path.string());
    FAIL("accepted a malformed file; expected: " << expected);
  } catch (const SafetensorsError& error) {
    const std::string message = error.what();
    CHECK_MESSAGE(message.find(path.string()) != std::string::npos, message);
    CHECK_MESSAGE(message.find(expected) != std::string::npos, message);
  }
}

}  // namespace

TEST_CASE("tensors round-trip in fp32, bf16, fp16 and int64, with metadata and an 8-byte-aligned data section") {
  TempDir dir;
  const torch::Tensor weights = torch::randn({5, 3});
  const torch::Tensor ids = torch::arange(7, torch::kInt64);
  const torch::Tensor strided = torch::randn({4, 6}).t();  // not contiguous
  write_safetensors(dir.file("a.safetensors"), {{"w", weights}, {"ids", ids}, {"t", strided}}, {{"format", "pt"}});
  CHECK_FALSE(std::filesystem::exists(dir.file("a.safetensors") + ".tmp." + std::to_string(getpid())));

  SafetensorsFile file(dir.file("a.safetensors"));
  CHECK(file.metadata().at("format") == "pt");
  REQUIRE(file.entries().size() == 3);
  CHECK(file.entries()[0].name == "w");
  CHECK(file.find("ids")->dtype == "I64");
  CHECK(torch::equal(file.load("w"), weights));
  CHECK(torch::equal(file.load("ids"), ids));
  CHECK(torch::equal(file.load("t"), strided));
  CHECK(torch::equal(file.load_slice("w", 0, 1, 3), weights.narrow(0, 1, 3)));
  CHECK(torch::equal(file.load_slice("w", 1, 1, 2), weights.narrow(1, 1, 2)));
  CHECK_THROWS_WITH_AS(file.load_slice("w", 0, 4, 2), doctest::Contains("\"w\": slice [4, 6)"), SafetensorsError);
  CHECK_THROWS_WITH_AS(file.load("missing"), doctest::Contains("no tensor \"missing\""), SafetensorsError);
  // Header length is a multiple of 8, so the data section is aligned.
  std::ifstream in(dir.file("a.safetensors"), std::ios::binary);
  uint64_t length = 0;
  in.read(reinterpret_cast<char*>(&length), 8);
  CHECK(length % 8 == 0);

  for (const auto dtype : {torch::kBFloat16, torch::kFloat16}) {
    write_safetensors(dir.file("h.safetensors"), {{"w", weights}}, {}, dtype);
    SafetensorsFile half(dir.file("h.safetensors"));
    CHECK(half.find("w")->dtype == (dtype == torch::kBFloat16 ? "BF16" : "F16"));
    CHECK((half.load("w").scalar_type() == dtype));
    CHECK(torch::equal(half.load("w"), weights.to(dtype)));
    // Loaded as fp32: the rounded values, exactly.
    CHECK(torch::equal(half.load("w", torch::kFloat32), weights.to(dtype).to(torch::kFloat32)));
  }
}

TEST_CASE("a directory is written as one file or as shards with an index, and reads back either way") {
  TempDir dir;
  TensorList tensors;
  for (int i = 0; i < 5; ++i) tensors.emplace_back("layer." + std::to_string(i), torch::randn({16, 16}));  // 1 KiB each
  const auto single = write_safetensors_directory(dir.file("m"), tensors, 1 << 20);
  CHECK(single == std::vector<std::string>{"model.safetensors"});
  SafetensorsCheckpoint one(dir.file("m"));
  CHECK(one.names().size() == 5);

  const auto sharded = write_safetensors_directory(dir.file("m"), tensors, 2048);
  CHECK(sharded == std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                            "model-00003-of-00003.safetensors", "model.safetensors.index.json"});
  CHECK_FALSE(std::filesystem::exists(dir.file("m/model.safetensors")));
  std::ifstream index_file(dir.file("m/model.safetensors.index.json"));
  const auto index = nlohmann::json::parse(index_file);
  CHECK(index["metadata"]["total_size"] == 5 * 1024);
  CHECK(index["weight_map"]["layer.4"] == "model-00003-of-00003.safetensors");
  SafetensorsCheckpoint shards(dir.file("m"));
  for (const auto& [name, tensor] : tensors) CHECK(torch::equal(shards.load(name), tensor));
  CHECK_THROWS_WITH_AS(shards.load("layer.9"), doctest::Contains("missing tensor \"layer.9\""), SafetensorsError);

  // Back to fewer shards: stale ones go.
  write_safetensors_directory(dir.file("m"), tensors, 2048, torch::kBFloat16);  // 512 bytes each: 4 + 1
  CHECK_FALSE(std::filesystem::exists(dir.file("m/model-00003-of-00003.safetensors")));
  CHECK(std::filesystem::exists(dir.file("m/model-00002-of-00002.safetensors")));
  CHECK((SafetensorsCheckpoint(dir.file("m")).load("layer.0").scalar_type() == torch::kBFloat16));
}

TEST_CASE("an index that points at the wrong shard or a missing file, or is past its bound, is reported by name") {
  TempDir dir;
  write_safetensors_directory(dir.file("m"), {{"a", torch::ones({2})}, {"b", torch::ones({2})}}, 8);
  dir.write("m/model.safetensors.index.json",
            R"({"weight_map": {"a": "model-00002-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
  const std::string misplaced = "tensor \"a\" is not in " + dir.file("m/model-00002-of-00002.safetensors");
  CHECK_THROWS_WITH_AS(SafetensorsCheckpoint(dir.file("m")), doctest::Contains(misplaced.c_str()), SafetensorsError);
  dir.write("m/model.safetensors.index.json", R"({"weight_map": {"a": "gone.safetensors"}})");
  const std::string gone = dir.file("m/gone.safetensors");
  CHECK_THROWS_WITH_AS(SafetensorsCheckpoint(dir.file("m")), doctest::Contains(gone.c_str()), SafetensorsError);
  dir.write("m/model.safetensors.index.json", R"({"weight_map": {"a": "../x.safetensors"}})");
  CHECK_THROWS_WITH_AS(SafetensorsCheckpoint(dir.file("m")), doctest::Contains("not a file name in the directory"),
                       SafetensorsError);
  // Past its 64 MiB bound (a sparse file: no disk, but 65 MiB to read).
  std::filesystem::resize_file(dir.path() / "m/model.safetensors.index.json", std::uintmax_t{65} << 20);
  const std::string too_large = dir.file("m/model.safetensors.index.json") + ": is larger than 64 MiB";
  CHECK_THROWS_WITH_AS(SafetensorsCheckpoint(dir.file("m")), doctest::Contains(too_large.c_str()), SafetensorsError);
  std::filesystem::create_directories(dir.path() / "empty");
  CHECK_THROWS_WITH_AS(SafetensorsCheckpoint(dir.file("empty")), doctest::Contains("no model.safetensors"),
                       SafetensorsError);
}

TEST_CASE("malformed files are errors naming the file and tensor, never a crash or an out-of-bounds read") {
  TempDir dir;
  const std::string good = R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})";
  SUBCASE("too short") { check_rejected(dir, "abc", "too short"); }
  SUBCASE("header length larger than the file") {
    check_rejected(dir, raw_file(good, 16, 1ull << 40), "larger than the file");
    check_rejected(dir, raw_file(good, 0, good.size() + 1), "larger than the file");
  }
  SUBCASE("header not JSON") { check_rejected(dir, raw_file("{\"w\": [", 16), "header is not a JSON object"); }
  SUBCASE("header a JSON array") { check_rejected(dir, raw_file("[1, 2]", 16), "header is not a JSON object"); }
  SUBCASE("offsets beyond the data") {
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [8, 24]}})", 16),
                   "tensor \"w\": data_offsets [8, 24] out of range");
  }
  SUBCASE("offsets reversed") {
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", 16),
                   "tensor \"w\": data_offsets [8, 0] out of range");
  }
  SUBCASE("negative offsets") {
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", 16),
                   "tensor \"w\": data_offsets must be two non-negative integers");
  }
  SUBCASE("overlapping tensors") {
    check_rejected(dir,
                   raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                            16),
                   "tensors \"a\" and \"b\" overlap");
  }
  SUBCASE("bytes that belong to no tensor: a gap, a lead, a tail, or a duplicate name's lost twin") {
    check_rejected(dir,
                   raw_file(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                                "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                            16),
                   "bytes [4, 8) of the 16-byte data section belong to no tensor (between tensors \"a\" and \"b\")");
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", 16),
                   "bytes [0, 8) of the 16-byte data section belong to no tensor (before tensor \"w\")");
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", 16),
                   "bytes [8, 16) of the 16-byte data section belong to no tensor (after tensor \"w\")");
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})", 16),
                   "bytes [0, 16) of the 16-byte data section belong to no tensor");
    // nlohmann keeps one "w"; the other's bytes are left over.
    check_rejected(dir,
                   raw_file(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                "w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                            16),
                   "a duplicate tensor name hides one");
  }
  SUBCASE("empty tensors anywhere in the data section are no holes") {
    const auto path = dir.write("empty.safetensors",
                                raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                             "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [4, 4]},
                                             "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})",
                                         16));
    SafetensorsFile file(path.string());
    CHECK(file.entries().size() == 3);
  }
  SUBCASE("byte size and shape disagree") {
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [3, 2], "data_offsets": [0, 16]}})", 16),
                   "tensor \"w\": holds 16 bytes but dtype F32 and shape [3,2] need 24");
    check_rejected(dir, raw_file(R"({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 16]}})", 16),
                   "need 8");
  }
  SUBCASE("a shape whose byte size overflows") {
    check_rejected(dir,
                   raw_file(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 16]}})",
                            16),
                   "tensor \"w\": shape");
  }
  SUBCASE("negative shape") {
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "shape": [-1, 4], "data_offsets": [0, 16]}})", 16),
                   "non-integer or negative size");
  }
  SUBCASE("unknown dtype") {
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F8_E9", "shape": [2], "data_offsets": [0, 2]}})", 16),
                   "unsupported safetensors dtype \"F8_E9\"");
  }
  SUBCASE("missing keys and bad metadata") {
    check_rejected(dir, raw_file(R"({"w": {"shape": [2], "data_offsets": [0, 8]}})", 16), "tensor \"w\": no dtype");
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "data_offsets": [0, 8]}})", 16), "tensor \"w\": no shape");
    check_rejected(dir, raw_file(R"({"__metadata__": {"format": 1}})", 0), "__metadata__ value of \"format\"");
  }
  SUBCASE("a zero size does not hide an overflowing product of the others") {
    check_rejected(dir,
                   raw_file(R"({"w": {"dtype": "F32", "shape": [0, 4611686018427387904, 4611686018427387904],
                                "data_offsets": [0, 0]}})",
                            16),
                   "is too large");
  }
  SUBCASE("nesting past the JSON bound is refused, never recursed into") {
    const std::string deep = std::string(200000, '[') + std::string(200000, ']');
    check_rejected(dir, raw_file(R"({"w": {"dtype": "F32", "shape": )" + deep + R"(, "data_offsets": [0, 0]}})", 16),
                   "header is not a JSON object");
  }
  SUBCASE("a value quoted in a message is cut short") {
    const std::string long_shape = "[1" + std::string(100000, ' ') + ", -1]";
    const auto path = dir.write("bad.safetensors", raw_file(R"({"w": {"dtype": "F32", "shape": )" + long_shape +
                                                                R"(, "data_offsets": [0, 4]}})", 16));
    try {
      SafetensorsFile file(path.string());
      FAIL("accepted a negative size");
    } catch (const SafetensorsError& error) {
      CHECK(std::string(error.what()).size() < 400);
    }
  }
  SUBCASE("the good header is accepted") {
    const auto path = dir.write("good.safetensors", raw_file(good, 16));
    SafetensorsFile file(path.string());
    CHECK(file.load("w").sum().item<float>() == 0);
  }
}

TEST_CASE("entries come in data order, and a header of many entries parses in n log n") {
  TempDir dir;
  std::string header = "{";
  constexpr int kEntries = 100000;
  for (int i = kEntries - 1; i >= 0; --i)  // names descending, offsets ascending
    header += "\"t" + std::to_string(i) + "\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [" +
              std::to_string(kEntries - 1 - i) + ", " + std::to_string(kEntries - i) + "]},";
  header.back() = '}';
  const auto path = dir.write("many.safetensors", raw_file(header, kEntries));
  const auto start = std::chrono::steady_clock::now();
  SafetensorsFile file(path.string());
  // An ordered_json header took ~9 s here (a linear search per key).
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  REQUIRE(file.entries().size() == kEntries);
  CHECK(file.entries().front().name == "t" + std::to_string(kEntries - 1));
  CHECK(file.entries().back().name == "t0");
  CHECK(file.find("t5") != nullptr);
}

TEST_CASE("a FIFO in a model file's place is refused at once, not waited on") {
  TempDir dir;
  const std::string fifo = (dir.path() / "model.safetensors").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(SafetensorsFile{fifo}, doctest::Contains("not a regular file"), SafetensorsError);
}
