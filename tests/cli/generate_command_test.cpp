// `meshrun generate`: the engine from the command line on a saved model
// directory, equal to the library's greedy generation, JSONL output for a
// prompts file, and its errors.
#include "tests/dist/torch_doctest.hpp"

#include <set>

#include <nlohmann/json.hpp>

#include "lint/run_meshrun.hpp"
#include "meshrun/rollout/generation.hpp"
#include "meshrun/model/hf_model.hpp"
#include "meshrun/tokenizer/tokenizer.hpp"
#include "tokenizer/tokenizer_test_support.hpp"

namespace meshrun {
namespace {

using test::run_meshrun;
using test::TempDir;

// builtin:tiny with seeded random weights, saved as a model directory.
std::string saved_tiny_model(const TempDir& dir) {
  torch::manual_seed(5);
  LlamaModel model = load_hf_model("builtin:tiny", ModelOptions{});
  const std::string path = dir / "tiny";
  save_hf_model(path, model);
  return path;
}

std::vector<int32_t> greedy_ids(const std::string& model_dir, const std::string& text, int64_t new_tokens) {
  auto tokenizer = load_tokenizer("builtin:bytes");
  Generator generator(load_hf_model(model_dir, ModelOptions{}), nullptr, 1, 64);
  SamplingOptions options;
  options.temperature = 0;
  options.max_new_tokens = new_tokens;
  options.stop_ids = {*tokenizer->eos_id()};
  options.vocab_limit = tokenizer->vocab_size();
  return generator.generate({tokenizer->encode(text, true)}, options).front().response;
}

}  // namespace

TEST_CASE("meshrun generate continues a prompt greedily, as the library does") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  const std::string model = saved_tiny_model(dir);
  auto result = run_meshrun({"generate", model, "--tokenizer", "builtin:bytes", "--prompt", "abc",
                             "--max-new-tokens", "12", "--format", "jsonl"});
  REQUIRE_MESSAGE(result.exit_code == 0, result.err);
  const auto line = nlohmann::json::parse(result.out);
  CHECK(line["prompt"] == "abc");
  CHECK(line["response_ids"].get<std::vector<int32_t>>() == greedy_ids(model, "abc", 12));
  CHECK(line["tokens"].get<int>() == static_cast<int>(line["response_ids"].size()));
  // Text output is the decoded continuation, and greedy runs repeat.
  auto text = run_meshrun({"generate", model, "--tokenizer", "builtin:bytes", "--prompt", "abc", "--max-new-tokens", "12"});
  CHECK(text.exit_code == 0);
  CHECK(text.out == line["response"].get<std::string>() + "\n");
}

TEST_CASE("meshrun generate reads a prompts file and samples by seed") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  const std::string model = saved_tiny_model(dir);
  test::write_text(dir / "prompts.jsonl", "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n{\"prompt\": \"three\"}\n");
  auto run = [&](const std::string& seed) {
    return run_meshrun({"generate", model, "--tokenizer", "builtin:bytes", "--prompts", dir / "prompts.jsonl",
                        "--temperature", "1", "--top-p", "0.9", "--seed", seed, "--max-new-tokens", "8", "--batch",
                        "2", "--format", "jsonl"});
  };
  auto first = run("3");
  REQUIRE_MESSAGE(first.exit_code == 0, first.err);
  std::vector<std::string> prompts;
  std::istringstream lines(first.out);
  for (std::string line; std::getline(lines, line);) prompts.push_back(nlohmann::json::parse(line)["prompt"]);
  CHECK(prompts == std::vector<std::string>{"one", "two", "three"});
  CHECK(run("3").out == first.out);
  CHECK(run("4").out != first.out);
}

TEST_CASE("meshrun generate --num-samples: each prompt's samples, each its own stream, whatever the batch") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  const std::string model = saved_tiny_model(dir);
  test::write_text(dir / "prompts.jsonl", "{\"prompt\": \"one\"}\n{\"prompt\": \"two\"}\n");
  auto run = [&](const std::string& batch) {
    return run_meshrun({"generate", model, "--tokenizer", "builtin:bytes", "--prompts", dir / "prompts.jsonl",
                        "--temperature", "1", "--seed", "7", "--max-new-tokens", "10", "--num-samples", "4",
                        "--batch", batch, "--format", "jsonl"});
  };
  auto wide = run("8");
  REQUIRE_MESSAGE(wide.exit_code == 0, wide.err);
  std::vector<nlohmann::json> samples;
  std::istringstream lines(wide.out);
  for (std::string line; std::getline(lines, line);) samples.push_back(nlohmann::json::parse(line));
  REQUIRE(samples.size() == 8);
  std::set<std::vector<int32_t>> distinct;
  for (size_t i = 0; i < samples.size(); ++i) {
    CAPTURE(i);
    CHECK(samples[i]["prompt"] == (i < 4 ? "one" : "two"));
    CHECK(samples[i]["sample"].get<int>() == static_cast<int>(i % 4));
    distinct.insert(samples[i]["response_ids"].get<std::vector<int32_t>>());
  }
  CHECK(distinct.size() > 2);  // the samples of a prompt differ
  // One slot at a time (no prefill shared) gives the very same samples.
  CHECK(run("1").out == wide.out);
  CHECK(run_meshrun({"generate", model, "--tokenizer", "builtin:bytes", "--prompt", "x", "--num-samples", "0"})
            .exit_code == 2);
}

TEST_CASE("meshrun generate explains a missing tokenizer, a missing model and a bad prompts file") {
  REQUIRE(test::meshrun_built());
  TempDir dir;
  const std::string model = saved_tiny_model(dir);
  auto no_tokenizer = run_meshrun({"generate", model, "--prompt", "x"});
  CHECK(no_tokenizer.exit_code == 1);
  CHECK(no_tokenizer.err.find("has no tokenizer.json or tokenizer.model; pass --tokenizer") != std::string::npos);
  auto no_model = run_meshrun({"generate", dir / "missing", "--tokenizer", "builtin:bytes", "--prompt", "x"});
  CHECK(no_model.exit_code == 1);
  CHECK(no_model.err.find("missing") != std::string::npos);
  test::write_text(dir / "bad.jsonl", "{\"prompt\": \"ok\"}\n{\"text\": 1}\n");
  auto bad = run_meshrun({"generate", model, "--tokenizer", "builtin:bytes", "--prompts", dir / "bad.jsonl"});
  CHECK(bad.exit_code == 1);
  CHECK(bad.err.find("bad.jsonl:2") != std::string::npos);
  CHECK(run_meshrun({"generate", model, "--prompt", "x", "--prompts", dir / "bad.jsonl"}).exit_code == 2);
  // Past the model's positions (builtin:tiny has 512), as vLLM's
  // max_model_len refuses: before a KV cache of that size is allocated.
  auto too_long = run_meshrun({"generate", model, "--tokenizer", "builtin:bytes", "--prompt", "hello", "--batch", "64",
                               "--num-samples", "64", "--max-new-tokens", "1048576"});
  CHECK(too_long.exit_code == 1);
  CHECK(too_long.err.find("--max-new-tokens 1048576 pass the model's context of 512 positions") != std::string::npos);
  CHECK(run_meshrun({"generate", model, "--tokenizer", "builtin:bytes", "--prompt", "x", "--top-k", "-5"}).exit_code ==
        2);
}
}  // namespace meshrun
