// The blocked CPU attention against softmax(q kᵀ + mask) v written out in
// whole-tensor operations: outputs and q / k / v gradients, with grouped
// kv heads, a length that is not a multiple of the block, packed sequences,
// padding, and a sliding window; and when it declines to run.
#include "tests/dist/torch_doctest.hpp"

#include <ATen/Parallel.h>

#include <fstream>
#include <set>
#include <string>

#include "meshrun/arch/model_config.hpp"
#include "src/model/cpu_attention.hpp"
#include "src/model/layers.hpp"

namespace meshrun::model_detail {
namespace {

struct Case {
  int64_t batch, heads, kv_heads, seq, dim;
  torch::Tensor mask;   // [1 or batch, 1, seq, keys]
  torch::Tensor valid;  // [batch, seq]: queries whose outputs count
  torch::Tensor positions = {};  // [seq]: the queries' key columns (undefined: keys == seq)
  int64_t keys = 0;              // 0: seq
};

torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& mask, int64_t kv_heads) {
  const int64_t batch = q.size(0), heads = q.size(1), keys = k.size(1), dim = q.size(3);
  const auto expand = [&](const torch::Tensor& t) {
    return t.view({batch, kv_heads, 1, keys, dim}).expand({batch, kv_heads, heads / kv_heads, keys, dim})
        .reshape({batch, heads, keys, dim});
  };
  const torch::Tensor scores = torch::matmul(q, expand(k).transpose(-1, -2)) + mask;
  return torch::matmul(torch::softmax(scores, -1), expand(v));
}

void check_against_reference(const Case& c) {
  torch::manual_seed(11);
  const auto q = torch::randn({c.batch, c.heads, c.seq, c.dim}).requires_grad_(true);
  const int64_t keys = c.keys > 0 ? c.keys : c.seq;
  const auto k = torch::randn({c.batch * c.kv_heads, keys, c.dim}).requires_grad_(true);
  const auto v = torch::randn({c.batch * c.kv_heads, keys, c.dim}).requires_grad_(true);
  // Training gives padding queries no gradient; neither does this.
  const auto keep = c.valid.view({c.batch, 1, c.seq, 1}).to(torch::kFloat);
  const auto grad_out = torch::randn({c.batch, c.heads, c.seq, c.dim}) * keep;

  REQUIRE(cpu_causal_attention_applies(q, c.batch, c.heads));
  const auto out = cpu_causal_attention(q, k, v, c.mask, c.positions);
  out.backward(grad_out);
  const auto grads = std::vector<torch::Tensor>{q.grad().clone(), k.grad().clone(), v.grad().clone()};
  for (const auto* t : {&q, &k, &v}) const_cast<torch::Tensor&>(*t).mutable_grad().reset();

  const auto expected = reference_attention(q, k, v, c.mask, c.kv_heads);
  expected.backward(grad_out);
  CHECK(((out - expected) * keep).abs().max().item<double>() < 1e-5);
  CHECK((grads[0] - q.grad()).abs().max().item<double>() < 1e-4);
  CHECK((grads[1] - k.grad()).abs().max().item<double>() < 1e-4);
  CHECK((grads[2] - v.grad()).abs().max().item<double>() < 1e-4);
  CHECK(k.grad().abs().sum().item<double>() > 0);
}

torch::Tensor all_valid(int64_t batch, int64_t seq) { return torch::ones({batch, seq}, torch::kBool); }

// Two intra-op threads, as on the 2-core machines this runs on, so that the
// cases below have enough (sequence, head) pairs whatever the machine.
struct TwoThreads {
  int before = at::get_num_threads();
  TwoThreads() { at::set_num_threads(2); }
  ~TwoThreads() { at::set_num_threads(before); }
};

TEST_CASE("blocked CPU attention equals the whole-square computation, gradients included") {
  const TwoThreads threads;
  ModelConfig config;
  SUBCASE("plain causal, grouped kv heads, a length that is no multiple of the block") {
    const int64_t seq = 150;
    check_against_reference({2, 4, 2, seq, 16, attention_mask(config, seq, {}, {}, torch::kFloat, torch::kCPU),
                             all_valid(2, seq)});
  }
  SUBCASE("packed sequences: no attention across sample boundaries") {
    const int64_t seq = 130;
    auto ids = torch::zeros({2, seq}, torch::kInt64);
    ids.narrow(1, 40, 70).fill_(1);
    ids.narrow(1, 110, 20).fill_(2);
    ids[1].narrow(0, 64, 66).fill_(3);
    check_against_reference({2, 2, 1, seq, 8, attention_mask(config, seq, ids, {}, torch::kFloat, torch::kCPU),
                             all_valid(2, seq)});
  }
  SUBCASE("left and right padding: padded queries and keys take no part") {
    const int64_t seq = 100;
    auto padding = torch::ones({2, seq}, torch::kInt64);
    padding[0].narrow(0, 0, 30).zero_();
    padding[1].narrow(0, 70, 30).zero_();
    check_against_reference({2, 3, 3, seq, 8,
                             attention_mask(config, seq, {}, padding, torch::kFloat, torch::kCPU), padding.ne(0)});
  }
  SUBCASE("sequence parallelism: one rank's head and tail chunks against the whole row") {
    // sp 2 over a row of 200 (padded to 200 = 4 chunks of 50): rank 0 holds
    // columns [0, 50) and [150, 200), rank 1 [50, 150); packed, with padding.
    const int64_t length = 200;
    auto ids = torch::zeros({2, length}, torch::kInt64);
    ids.narrow(1, 90, 110).fill_(1);
    auto padding = torch::ones({2, length}, torch::kInt64);
    padding[1].narrow(0, 180, 20).zero_();
    const auto columns = torch::arange(length, torch::kInt64);
    for (const auto& local : {torch::cat({torch::arange(0, 50), torch::arange(150, 200)}), torch::arange(50, 150)}) {
      const auto mask = attention_mask_between(config, local, columns, ids, padding, torch::kFloat);
      check_against_reference({2, 4, 2, local.size(0), 8, mask, padding.index_select(1, local).ne(0),
                               local.contiguous(), length});
    }
  }
  SUBCASE("a sliding window shorter than a block") {
    config.sliding_window = 20;
    const int64_t seq = 140;
    check_against_reference({1, 4, 4, seq, 8, attention_mask(config, seq, {}, {}, torch::kFloat, torch::kCPU),
                             all_valid(1, seq)});
  }
}

TEST_CASE("blocked CPU attention declines what it does not serve") {
  const TwoThreads threads;
  {
    // More keys than queries need the queries' positions, ascending and in range.
    const auto q = torch::zeros({1, 2, 4, 4}), kv = torch::zeros({1, 8, 4}), mask = torch::zeros({1, 1, 4, 8});
    CHECK_THROWS_AS(cpu_causal_attention(q, kv, kv, mask), std::logic_error);
    CHECK_THROWS_AS(cpu_causal_attention(q, kv, kv, mask, torch::tensor({0, 2, 1, 3}, torch::kInt64)),
                    std::logic_error);
    CHECK_THROWS_AS(cpu_causal_attention(q, kv, kv, mask, torch::tensor({0, 1, 2, 8}, torch::kInt64)),
                    std::logic_error);
    CHECK_NOTHROW(cpu_causal_attention(q, kv, kv, mask, torch::tensor({0, 1, 6, 7}, torch::kInt64)));
  }
  const auto q = torch::zeros({1, 2, 8, 4});
  CHECK(cpu_causal_attention_applies(q, 1, 2));
  CHECK_FALSE(cpu_causal_attention_applies(q, 1, 1));
  CHECK_FALSE(cpu_causal_attention_applies(q.to(torch::kFloat64), 1, 2));
  CHECK_FALSE(cpu_causal_attention_applies(q.to(torch::kBFloat16), 1, 2));
}

TEST_CASE("the attention's BLAS calls bring no second BLAS or OpenMP runtime into the process") {
  const TwoThreads threads;
  const auto q = torch::randn({2, 2, 70, 8});
  const auto kv = torch::randn({2 * 2, 70, 8});
  REQUIRE(cpu_causal_attention_applies(q, 2, 2));
  cpu_causal_attention(q, kv, kv, torch::zeros({1, 1, 70, 70})).sum().item<float>();
  std::set<std::string> openmp, blas;
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t slash = line.find('/');
    if (slash == std::string::npos) continue;
    const std::string path = line.substr(slash);
    const std::string name = path.substr(path.rfind('/') + 1);
    if (name.find("gomp") != std::string::npos || name.find("libomp") != std::string::npos ||
        name.find("iomp") != std::string::npos)
      openmp.insert(path);
    if (name.find("blas") != std::string::npos && name.find("cublas") == std::string::npos) blas.insert(path);
  }
  CAPTURE(openmp.size());
  REQUIRE(openmp.size() == 1);
  CHECK_MESSAGE(openmp.begin()->find("/torch/lib/") != std::string::npos, *openmp.begin());
  CHECK_MESSAGE(blas.empty(), *blas.begin());
}

}  // namespace
}  // namespace meshrun::model_detail
