// Hub names in a local Hugging Face cache built by the test as
// huggingface_hub lays it out: name parsing, the cache root's environment
// precedence, refs, tags and commit revisions, local paths winning, and the
// errors for a missing repository, a missing ref and a dangling one;
// datasets resolve to their one JSON/JSONL file; the planner reads a cached
// model's config.json and says so.
#include <sys/stat.h>

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "meshrun/arch/hub_cache.hpp"
#include "meshrun/arch/architecture.hpp"
#include "support/temp_dir.hpp"

namespace meshrun {
namespace {

namespace fs = std::filesystem;

const std::string kCommit = "0123456789abcdef0123456789abcdef01234567";
const std::string kOtherCommit = "fedcba9876543210fedcba9876543210fedcba98";

EnvLookup env_of(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// models--org--tiny with refs/main → kCommit and refs/v1 → kOtherCommit, both snapshots present.
fs::path make_model_repo(const fs::path& cache) {
  const fs::path repo = cache / "models--org--tiny";
  write(repo / "refs" / "main", kCommit);
  write(repo / "refs" / "v1", kOtherCommit + "\n");
  write(repo / "snapshots" / kCommit / "config.json", "{}");
  write(repo / "snapshots" / kOtherCommit / "config.json", "{}");
  return repo;
}

}  // namespace

TEST_CASE("hub names are org/name with an optional @revision") {
  auto hub = parse_hub_name("meta-llama/Llama-3.1-8B");
  REQUIRE(hub);
  CHECK(hub->org == "meta-llama");
  CHECK(hub->name == "Llama-3.1-8B");
  CHECK(hub->revision == "main");
  hub = parse_hub_name("Qwen/Qwen2.5-0.5B@refs/pr/1");
  REQUIRE(hub);
  CHECK(hub->revision == "refs/pr/1");
  for (const char* bad : {"tiny", "a/b/c", "/abs/path", "./x", "a/", "/b", "a b/c", "builtin:tiny", "org/name@",
                          "org/name@../x", "../x/y", "a/.."})
    CHECK_MESSAGE(!parse_hub_name(bad), bad);
}

TEST_CASE("the cache root: HF_HUB_CACHE, else HF_HOME/hub, else XDG_CACHE_HOME, else ~/.cache") {
  CHECK(hub_cache_root(env_of({{"HF_HUB_CACHE", "/c"}, {"HF_HOME", "/h"}, {"HOME", "/u"}})) == "/c");
  CHECK(hub_cache_root(env_of({{"HF_HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}, {"HOME", "/u"}})) == "/h/hub");
  CHECK(hub_cache_root(env_of({{"XDG_CACHE_HOME", "/x"}, {"HOME", "/u"}})) == "/x/huggingface/hub");
  CHECK(hub_cache_root(env_of({{"HOME", "/u"}})) == "/u/.cache/huggingface/hub");
}

TEST_CASE("a model name resolves through its ref, a tag or a commit to the snapshot") {
  test::TempDir temp;
  const fs::path cache = temp.path() / "hub";
  const fs::path repo = make_model_repo(cache);
  const EnvLookup env = env_of({{"HF_HUB_CACHE", cache.string()}});

  SourceResolution main = resolve_source("org/tiny", HubRepoType::model, env);
  CHECK(main.error.empty());
  CHECK(main.from_hub);
  CHECK(main.path == (repo / "snapshots" / kCommit).string());
  CHECK(main.describe() == "org/tiny → " + main.path);
  CHECK(resolve_source("org/tiny@v1", HubRepoType::model, env).path == (repo / "snapshots" / kOtherCommit).string());
  CHECK(resolve_source("org/tiny@" + kOtherCommit, HubRepoType::model, env).path ==
        (repo / "snapshots" / kOtherCommit).string());

  // Not hub names, or local paths: as they are.
  CHECK(resolve_source("builtin:tiny", HubRepoType::model, env).path == "builtin:tiny");
  CHECK_FALSE(resolve_source(temp.path().string(), HubRepoType::model, env).from_hub);
  // A dataset of that name is another repository.
  CHECK_FALSE(resolve_source("org/tiny", HubRepoType::dataset, env).error.empty());
}

TEST_CASE("a missing repository, a missing ref and a dangling ref are errors naming where it looked") {
  test::TempDir temp;
  const fs::path cache = temp.path() / "hub";
  const fs::path repo = make_model_repo(cache);
  const EnvLookup env = env_of({{"HF_HUB_CACHE", cache.string()}});

  SourceResolution missing = resolve_source("org/absent", HubRepoType::model, env);
  CHECK(missing.path.empty());
  CHECK(missing.error.find("org/absent is not in the local Hugging Face cache (no " +
                           (cache / "models--org--absent").string() + ")") != std::string::npos);
  CHECK(missing.error.find("huggingface-cli download org/absent") != std::string::npos);

  const SourceResolution no_ref = resolve_source("org/tiny@v9", HubRepoType::model, env);
  CHECK(no_ref.error.find("org/tiny@v9 has no ref") != std::string::npos);
  CHECK(no_ref.error.find("--revision v9") != std::string::npos);

  fs::remove_all(repo / "snapshots" / kOtherCommit);
  const SourceResolution dangling = resolve_source("org/tiny@v1", HubRepoType::model, env);
  CHECK(dangling.error.find("a dangling ref") != std::string::npos);
  CHECK(dangling.error.find(kOtherCommit) != std::string::npos);

  write(repo / "refs" / "broken", "not a commit");
  CHECK(resolve_source("org/tiny@broken", HubRepoType::model, env).error.find("does not hold a commit hash") !=
        std::string::npos);
  // A FIFO in a ref's place is not waited on.
  REQUIRE(::mkfifo((repo / "refs" / "pipe").c_str(), 0600) == 0);
  CHECK_FALSE(resolve_source("org/tiny@pipe", HubRepoType::model, env).error.empty());
}

TEST_CASE("a dataset name resolves to its snapshot's one JSON/JSONL file, or says why not") {
  test::TempDir temp;
  const fs::path cache = temp.path() / "hub";
  const EnvLookup env = env_of({{"HF_HUB_CACHE", cache.string()}});
  const fs::path one = cache / "datasets--org--one";
  write(one / "refs" / "main", kCommit);
  write(one / "snapshots" / kCommit / "README.md", "# one");
  write(one / "snapshots" / kCommit / "data" / "train.jsonl", "{}\n");
  const SourceResolution found = resolve_data_file("org/one", env);
  CHECK(found.error.empty());
  CHECK(found.path == (one / "snapshots" / kCommit / "data" / "train.jsonl").string());

  write(one / "snapshots" / kCommit / "data" / "test.jsonl", "{}\n");
  const SourceResolution two = resolve_data_file("org/one", env);
  CHECK(two.path.empty());
  CHECK(two.error.find("holds 2 JSON/JSONL files (data/test.jsonl, data/train.jsonl)") != std::string::npos);

  const fs::path none = cache / "datasets--org--none";
  write(none / "refs" / "main", kCommit);
  write(none / "snapshots" / kCommit / "data.csv", "a,b\n");
  CHECK(resolve_data_file("org/none", env).error.find("holds no .json or .jsonl file") != std::string::npos);
  CHECK(resolve_data_file("org/none", env).error.find("Parquet") == std::string::npos);
  // The hub's Parquet conversion alone: named, with how to convert it.
  const fs::path converted = cache / "datasets--org--gsm";
  write(converted / "refs" / "main", kCommit);
  write(converted / "snapshots" / kCommit / "main" / "train-00000-of-00001.parquet", "PAR1");
  const std::string parquet_only = resolve_data_file("org/gsm", env).error;
  CHECK(parquet_only.find("holds no .json or .jsonl file (only Parquet files such as "
                          "main/train-00000-of-00001.parquet, which meshrun does not read: convert one to JSON "
                          "Lines") != std::string::npos);
  CHECK(resolve_data_file("org/absent", env).error.find("huggingface-cli download --repo-type dataset org/absent") !=
        std::string::npos);
  // A local file stays as it is.
  CHECK(resolve_data_file((one / "refs" / "main").string(), env).path == (one / "refs" / "main").string());
}

TEST_CASE("the planner reads a cached model's config.json and names the cache; a public name not cached says so") {
  test::TempDir temp;
  const fs::path cache = temp.path() / "hub";
  const fs::path repo = cache / "models--org--small";
  write(repo / "refs" / "main", kCommit);
  write(repo / "snapshots" / kCommit / "config.json",
        R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128})");
  const char* before = std::getenv("HF_HUB_CACHE");
  const std::string restore = before ? before : "";
  setenv("HF_HUB_CACHE", cache.string().c_str(), 1);
  std::string error;
  const auto cached = resolve_architecture("org/small", error);
  const auto public_model = resolve_architecture("meta-llama/Llama-2-7b-hf", error);
  setenv("HF_HUB_CACHE", restore.c_str(), 1);
  REQUIRE_MESSAGE(cached, error);
  CHECK(cached->layers == 2);
  CHECK(cached->source == "Hugging Face cache: " + (repo / "snapshots" / kCommit / "config.json").string());
  REQUIRE(public_model);
  CHECK(public_model->source == "built-in table; not in the local Hugging Face cache");
}

}  // namespace meshrun
