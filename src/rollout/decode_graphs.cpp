// DecodeGraphs (decode_graphs.hpp): buckets, the fixed-shape input buffers,
// capture on first use and replay.
#include "decode_graphs.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#ifdef MESHRUN_HAVE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace meshrun::rollout_detail {

std::vector<int64_t> decode_batch_buckets(int64_t max_batch) {
  if (max_batch < 1) throw std::logic_error("decode buckets for a batch of " + std::to_string(max_batch));
  std::vector<int64_t> buckets;
  for (int64_t size : {1, 2, 4})
    if (size < max_batch) buckets.push_back(size);
  for (int64_t size = 8; size < max_batch; size += 8) buckets.push_back(size);
  buckets.push_back(max_batch);
  return buckets;
}

int64_t decode_width_blocks(int64_t blocks, int64_t max_blocks) {
  if (blocks < 1 || blocks > max_blocks)
    throw std::logic_error("a decode step over " + std::to_string(blocks) + " blocks where a sequence holds " +
                           std::to_string(max_blocks));
  int64_t width = 1;
  while (width < blocks) width *= 2;
  return std::min(width, max_blocks);
}

// One (batch, width)'s inputs, in one int64 buffer so that a step copies
// them with one transfer: tokens [batch], positions [batch], then the
// tables [batch × width]; `host` is pinned on CUDA, and `copied` says when
// the last transfer out of it finished (before the host writes it again).
struct DecodeGraphs::Shape {
  int64_t batch = 0, width = 0;
  torch::Tensor host, device;
  torch::Tensor tokens, positions, tables;  // views of `device`
  torch::Tensor logits;                     // the captured step's output
#ifdef MESHRUN_HAVE_CUDA
  at::cuda::CUDAEvent copied;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

struct DecodeGraphs::Pool {
#ifdef MESHRUN_HAVE_CUDA
  c10::MempoolId_t id = at::cuda::graph_pool_handle();
#endif
};

DecodeGraphs::DecodeGraphs(int64_t max_batch, int64_t max_blocks, int64_t scratch_block)
    : max_batch_(max_batch),
      max_blocks_(max_blocks),
      scratch_block_(scratch_block),
      buckets_(decode_batch_buckets(max_batch)) {
  if (max_blocks < 1 || scratch_block < 0)
    throw std::logic_error("decode graphs over " + std::to_string(max_blocks) + " blocks with scratch block " +
                           std::to_string(scratch_block));
}

DecodeGraphs::~DecodeGraphs() { release(); }

int64_t DecodeGraphs::graphs() const {
  int64_t held = 0;
#ifdef MESHRUN_HAVE_CUDA
  for (const auto& [key, shape] : shapes_) held += shape->graph ? 1 : 0;
#endif
  return held;
}

void DecodeGraphs::release() {
  // The outputs live in the graphs' pool: dropped with them.
  shapes_.clear();
  pool_.reset();
}

void DecodeGraphs::bind(const std::vector<torch::Tensor>& memory) {
  std::vector<const void*> storages;
  storages.reserve(memory.size());
  for (const torch::Tensor& tensor : memory)
    storages.push_back(tensor.defined() ? tensor.storage().data_ptr().get() : nullptr);
  if (storages == bound_) return;
  release();
  bound_ = std::move(storages);
}

DecodeGraphs::Shape& DecodeGraphs::shape_for(int64_t batch, int64_t width, const torch::Device& device) {
  std::unique_ptr<Shape>& slot = shapes_[{batch, width}];
  if (slot) return *slot;
  auto shape = std::make_unique<Shape>();
  shape->batch = batch;
  shape->width = width;
  const int64_t words = batch * (2 + width);
  const auto ids = torch::TensorOptions().dtype(torch::kInt64);
  shape->host = torch::empty({words}, ids.pinned_memory(device.is_cuda()));
  shape->device = device.is_cuda() ? torch::empty({words}, ids.device(device)) : shape->host;
  shape->tokens = shape->device.narrow(0, 0, batch).view({batch, 1});
  shape->positions = shape->device.narrow(0, batch, batch).view({batch, 1});
  shape->tables = shape->device.narrow(0, 2 * batch, batch * width).view({batch, width});
  slot = std::move(shape);
  return *slot;
}

torch::Tensor DecodeGraphs::step(LlamaModelImpl& model, PagedKvCache& cache, const std::vector<int64_t>& tokens,
                                 const std::vector<int64_t>& positions,
                                 const std::vector<const KvBlockTable*>& tables) {
  const auto rows = static_cast<int64_t>(tokens.size());
  if (rows < 1 || rows > max_batch_ || positions.size() != tokens.size() || tables.size() != tokens.size())
    throw std::logic_error("a decode step of " + std::to_string(rows) + " rows (" + std::to_string(positions.size()) +
                           " positions, " + std::to_string(tables.size()) + " tables) where at most " +
                           std::to_string(max_batch_) + " are live");
  int64_t needed = 1;
  for (size_t row = 0; row < tables.size(); ++row) {
    const auto held = static_cast<int64_t>(tables[row]->blocks.size());
    if (positions[row] < 0 || positions[row] >= held * cache.block_size())
      throw std::logic_error("decode step: position " + std::to_string(positions[row]) + " outside its " +
                             std::to_string(held) + " blocks");
    needed = std::max(needed, held);
  }
  const int64_t batch = *std::lower_bound(buckets_.begin(), buckets_.end(), rows);
  const int64_t width = decode_width_blocks(needed, max_blocks_);
  const torch::Device device = model.options().device;
  Shape& shape = shape_for(batch, width, device);
#ifdef MESHRUN_HAVE_CUDA
  if (device.is_cuda()) shape.copied.synchronize();  // the previous step's transfer is done with `host`
#endif
  // Padding rows: token 0 at position 0 of the scratch block, as are the
  // columns of a table past its blocks (masked: past the row's position).
  int64_t* words = shape.host.data_ptr<int64_t>();
  std::fill(words, words + batch * (2 + width), int64_t{0});
  int64_t* table_words = words + 2 * batch;
  std::fill(table_words, table_words + batch * width, scratch_block_);
  for (int64_t row = 0; row < rows; ++row) {
    words[row] = tokens[static_cast<size_t>(row)];
    words[batch + row] = positions[static_cast<size_t>(row)];
    const std::vector<int32_t>& blocks = tables[static_cast<size_t>(row)]->blocks;
    std::copy(blocks.begin(), blocks.end(), table_words + row * width);
  }
  ++steps_by_batch_[batch];
  if (!device.is_cuda()) return model.forward_paged_decode(shape.tokens, shape.positions, shape.tables, cache).narrow(0, 0, rows).clone();
#ifdef MESHRUN_HAVE_CUDA
  const c10::cuda::CUDAGuard device_guard(device);
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device.index());
  shape.device.copy_(shape.host, /*non_blocking=*/true);
  shape.copied.record(current);
  if (!shape.graph) {
    // Captured on a side stream (a capture may not use the legacy default
    // stream), after one eager run there: the first run of a shape sets up
    // what capture may not (cuBLAS workspaces, the rotary frequencies).
    if (!pool_) pool_ = std::make_unique<Pool>();
    const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(false, device.index());
    at::cuda::CUDAEvent ready;
    ready.record(current);
    ready.block(side);
    {
      const c10::cuda::CUDAStreamGuard on_side(side);
      model.forward_paged_decode(shape.tokens, shape.positions, shape.tables, cache);
      auto graph = std::make_unique<at::cuda::CUDAGraph>();
      // Thread-local: another thread of the process (an async checkpoint's
      // copies) may use CUDA meanwhile without breaking the capture.
      graph->capture_begin(pool_->id, cudaStreamCaptureModeThreadLocal);
      shape.logits = model.forward_paged_decode(shape.tokens, shape.positions, shape.tables, cache);
      graph->capture_end();
      shape.graph = std::move(graph);
    }
    at::cuda::CUDAEvent captured;
    captured.record(side);
    captured.block(current);
    ++captures_;
  }
  shape.graph->replay();
  ++replays_;
  return shape.logits.narrow(0, 0, rows).clone();
#else
  throw std::logic_error("decode graphs on " + device.str() + " in a build without CUDA");
#endif
}

}  // namespace meshrun::rollout_detail
