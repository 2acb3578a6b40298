// Helpers shared by the batch hook tests: a synthetic rollout batch that
// owns its arrays, and ways to run a hook and keep the HookError it throws.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hook_test_support.hpp"
#include "meshrun/hooks/hook_batch.hpp"
#include "support/temp_dir.hpp"

namespace meshrun::hooks_test {

inline std::string batch_fixture(const std::string& name) { return fixture("batch/" + name); }

// Four samples of 3 prompt and 16 response tokens. Sample i (1-based) has
// i * 3 response tokens (response_len, and the first ones in
// response_mask); response token j of sample i is 1'000'000'000'000 + 100 i
// + j, beyond int32 so that int64 reads are tested. Only response_ids,
// response_mask and response_len are writable (for on_rollout).
class SyntheticBatch {
 public:
  static constexpr int64_t samples = 4;
  static constexpr int64_t prompt_tokens = 3;
  static constexpr int64_t response_tokens = 16;
  static constexpr int64_t token_base = 1'000'000'000'000;

  SyntheticBatch() {
    for (int64_t i = 1; i <= samples; ++i) {
      for (int64_t j = 1; j <= prompt_tokens; ++j)
        prompt_ids.push_back(static_cast<int32_t>(10 * i + j));
      for (int64_t j = 1; j <= response_tokens; ++j) {
        response_ids.push_back(token_base + 100 * i + j);
        response_mask.push_back(j <= 3 * i ? 1 : 0);
      }
      response_len.push_back(static_cast<int32_t>(3 * i));
    }
  }

  std::vector<int32_t> prompt_ids;
  std::vector<int64_t> response_ids;
  std::vector<uint8_t> response_mask;
  std::vector<int32_t> response_len;
  std::vector<float> scores{0.5F, 1.5F, -2.0F, 0.25F};
  std::vector<double> values{0.125, 0.25, 0.375, 0.5};
  std::vector<std::string> prompts{"What is 6 x 7?", "Name a colour.", "2 + 2?", "Say hi."};
  std::vector<std::string> responses{"Answer: 42", "Answer: blue", "answer: 4", "Answer: 123\n"};
  int prompt_decodes = 0;
  int response_decodes = 0;

  HookBatch batch() {
    HookBatch batch;
    batch.size = samples;
    batch.arrays = {
        {"prompt_ids", HookArrayType::int32, prompt_ids.data(), {samples, prompt_tokens}, false},
        {"response_ids",
         HookArrayType::int64,
         response_ids.data(),
         {samples, response_tokens},
         true},
        {"response_mask",
         HookArrayType::uint8,
         response_mask.data(),
         {samples, response_tokens},
         true},
        {"response_len", HookArrayType::int32, response_len.data(), {samples}, true},
        {"scores", HookArrayType::float32, scores.data(), {samples}, false},
        {"values", HookArrayType::float64, values.data(), {samples}, false},
    };
    batch.prompt_text = [this](int64_t sample) {
      ++prompt_decodes;
      return prompts.at(static_cast<std::size_t>(sample));
    };
    batch.response_text = [this](int64_t sample) {
      ++response_decodes;
      return responses.at(static_cast<std::size_t>(sample));
    };
    batch.fields = {{"step", 7}, {"n_samples_per_prompt", 2}};
    return batch;
  }

  int64_t response_id(int64_t sample, int64_t token) const {  // 1-based
    return response_ids[static_cast<std::size_t>((sample - 1) * response_tokens + token - 1)];
  }
  uint8_t mask(int64_t sample, int64_t token) const {  // 1-based
    return response_mask[static_cast<std::size_t>((sample - 1) * response_tokens + token - 1)];
  }
};

// Runs `call` and returns the HookError it throws; fails the test when none is.
inline HookError hook_failure(const std::function<void()>& call) {
  try {
    call();
  } catch (const HookError& error) {
    return error;
  }
  throw std::logic_error("expected the hook to fail");
}

// Writes a script into `folder` and loads it.
inline std::unique_ptr<HookScript> script_in(const test::TempDir& folder, const std::string& name,
                                             const std::string& text,
                                             const HookOptions& options = {}) {
  return HookScript::load(folder.write(name, text).string(), options);
}

}  // namespace meshrun::hooks_test
