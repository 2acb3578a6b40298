// Group: collectives on one process group, each run under the timeout and
// explained on failure by RuntimeState::run.
#include "runtime_state.hpp"

namespace meshrun {

namespace dist_detail {

// A started collective: what it is, on which group, and since when.
struct PendingState {
  std::shared_ptr<GroupState> group;
  std::string operation;
  Clock::time_point began;
  compat::WorkPtr work;
  bool waited = false;
};

}  // namespace dist_detail

using dist_detail::GroupState;
using dist_detail::PendingState;

PendingCollective::PendingCollective(std::shared_ptr<PendingState> state) : state_(std::move(state)) {}

bool PendingCollective::waited() const { return !state_ || state_->waited; }

bool PendingCollective::ready() const { return waited() || state_->work->isCompleted(); }

void PendingCollective::wait() {
  if (waited()) return;
  auto& state = *state_;
  state.waited = true;
  auto& runtime = state.group->owner();
  try {
    state.work->wait(runtime.timeout());
  } catch (const DistError&) {
    throw;
  } catch (const c10::Error& error) {
    throw runtime.failure_of(*state.group, state.operation, state.began, error.what_without_backtrace());
  } catch (const std::exception& error) {
    throw runtime.failure_of(*state.group, state.operation, state.began, error.what());
  }
}

Group::Group(std::shared_ptr<GroupState> state) : state_(std::move(state)) {}

const std::string& Group::name() const { return state_->name; }
const std::vector<int>& Group::ranks() const { return state_->ranks; }
int Group::rank() const { return state_->rank; }
int Group::size() const { return static_cast<int>(state_->ranks.size()); }
std::string Group::backend() const { return state_->backend; }
std::string Group::device() const { return state_->device.str(); }

int Group::global_rank(int group_rank) const {
  if (group_rank < 0 || group_rank >= size())
    throw DistError("group " + name() + " has no rank " + std::to_string(group_rank) + " (size " +
                    std::to_string(size()) + ")");
  return state_->ranks[static_cast<size_t>(group_rank)];
}

c10d::ProcessGroup& Group::native() {
  state_->owner();
  return *state_->native;
}

void Group::barrier() {
  auto& runtime = state_->owner();
  runtime.run(*state_, "barrier", [&] {
    c10d::BarrierOptions options;
    options.timeout = runtime.timeout();
    state_->native->barrier(options)->wait();
  });
}

void Group::all_reduce(at::Tensor& tensor, ReduceOp op) {
  auto& runtime = state_->owner();
  runtime.run(*state_, "all_reduce", [&] {
    c10d::AllreduceOptions options;
    options.reduceOp = dist_detail::compat::to_c10d(op);
    options.timeout = runtime.timeout();
    std::vector<at::Tensor> tensors{tensor};
    state_->native->allreduce(tensors, options)->wait();
  });
}

void Group::broadcast(at::Tensor& tensor, int src_group_rank) {
  global_rank(src_group_rank);  // range check
  auto& runtime = state_->owner();
  runtime.run(*state_, "broadcast", [&] {
    c10d::BroadcastOptions options;
    options.rootRank = src_group_rank;
    options.timeout = runtime.timeout();
    std::vector<at::Tensor> tensors{tensor};
    state_->native->broadcast(tensors, options)->wait();
  });
}

std::vector<at::Tensor> Group::all_gather(const at::Tensor& tensor) {
  auto& runtime = state_->owner();
  return runtime.run(*state_, "all_gather", [&] {
    c10d::AllgatherOptions options;
    options.timeout = runtime.timeout();
    std::vector<at::Tensor> inputs{tensor.contiguous()};
    std::vector<std::vector<at::Tensor>> outputs(1);
    for (int i = 0; i < size(); ++i) outputs[0].push_back(at::empty_like(inputs[0]));
    state_->native->allgather(outputs, inputs, options)->wait();
    return outputs[0];
  });
}

at::Tensor Group::all_gather_into_tensor(const at::Tensor& tensor) {
  auto& runtime = state_->owner();
  return runtime.run(*state_, "all_gather", [&] {
    c10d::AllgatherOptions options;
    options.timeout = runtime.timeout();
    at::Tensor input = tensor.contiguous();
    std::vector<int64_t> shape = input.sizes().vec();
    if (shape.empty()) shape.push_back(1);
    shape[0] *= size();
    at::Tensor output = at::empty(shape, input.options());
    state_->native->_allgather_base(output, input, options)->wait();
    return output;
  });
}

at::Tensor Group::reduce_scatter(const at::Tensor& input, ReduceOp op) {
  if (input.dim() == 0 || input.size(0) % size() != 0)
    throw DistError("reduce_scatter on group " + name() + ": dim 0 of the input (" +
                    (input.dim() == 0 ? std::string("a scalar") : std::to_string(input.size(0))) +
                    ") must split into " + std::to_string(size()) + " equal parts");
  auto& runtime = state_->owner();
  return runtime.run(*state_, "reduce_scatter", [&] {
    c10d::ReduceScatterOptions options;
    options.reduceOp = dist_detail::compat::to_c10d(op);
    options.timeout = runtime.timeout();
    std::vector<int64_t> shape = input.sizes().vec();
    shape[0] /= size();
    at::Tensor output = at::empty(shape, input.options());
    at::Tensor contiguous = input.contiguous();
    state_->native->_reduce_scatter_base(output, contiguous, options)->wait();
    return output;
  });
}

at::Tensor Group::all_to_all(const at::Tensor& input, const std::vector<int64_t>& send_rows,
                             const std::vector<int64_t>& receive_rows) {
  const auto members = static_cast<size_t>(size());
  int64_t sent = 0, received = 0;
  bool negative = false;
  for (const int64_t rows : send_rows) sent += rows, negative |= rows < 0;
  for (const int64_t rows : receive_rows) received += rows, negative |= rows < 0;
  if (input.dim() == 0 || send_rows.size() != members || receive_rows.size() != members || negative ||
      sent != input.size(0))
    throw DistError("all_to_all on group " + name() + ": " + std::to_string(send_rows.size()) + " send and " +
                    std::to_string(receive_rows.size()) + " receive counts for " + std::to_string(members) +
                    " members, sending " + std::to_string(sent) + " of an input of " +
                    (input.dim() == 0 ? std::string("no") : std::to_string(input.size(0))) + " rows");
  auto& runtime = state_->owner();
  return runtime.run(*state_, "all_to_all", [&] {
    c10d::AllToAllOptions options;
    options.timeout = runtime.timeout();
    std::vector<int64_t> shape = input.sizes().vec();
    shape[0] = received;
    at::Tensor output = at::empty(shape, input.options());
    at::Tensor contiguous = input.contiguous();
    std::vector<int64_t> send = send_rows, receive = receive_rows;
    state_->native->alltoall_base(output, contiguous, receive, send, options)->wait();
    return output;
  });
}

namespace {

// Starts `operation` on `group`; a failure to start is explained like a
// failure to finish.
template <class Start>
PendingCollective start_pending(const std::shared_ptr<GroupState>& group, std::string operation, Start&& start) {
  auto state = std::make_shared<PendingState>();
  state->group = group;
  state->operation = std::move(operation);
  state->began = dist_detail::Clock::now();
  auto& runtime = group->owner();
  runtime.run(*group, state->operation, [&] { state->work = start(runtime); });
  return PendingCollective(std::move(state));
}

}  // namespace

PendingCollective Group::all_reduce_async(at::Tensor& tensor, ReduceOp op) {
  return start_pending(state_, "all_reduce", [&](dist_detail::RuntimeState& runtime) {
    c10d::AllreduceOptions options;
    options.reduceOp = dist_detail::compat::to_c10d(op);
    options.timeout = runtime.timeout();
    std::vector<at::Tensor> tensors{tensor};
    return state_->native->allreduce(tensors, options);
  });
}

PendingCollective Group::reduce_scatter_async(at::Tensor& input, at::Tensor& output, ReduceOp op) {
  if (input.dim() == 0 || input.size(0) % size() != 0 || output.dim() == 0 || output.size(0) * size() != input.size(0))
    throw DistError("reduce_scatter on group " + name() + ": an input of " +
                    (input.dim() == 0 ? std::string("no") : std::to_string(input.size(0))) +
                    " rows does not split into " + std::to_string(size()) + " outputs of " +
                    (output.dim() == 0 ? std::string("no") : std::to_string(output.size(0))) + " rows");
  return start_pending(state_, "reduce_scatter", [&](dist_detail::RuntimeState& runtime) {
    c10d::ReduceScatterOptions options;
    options.reduceOp = dist_detail::compat::to_c10d(op);
    options.timeout = runtime.timeout();
    return state_->native->_reduce_scatter_base(output, input, options);
  });
}

PendingCollective Group::all_gather_into_tensor_async(at::Tensor& output, const at::Tensor& input) {
  if (input.dim() == 0 || output.dim() == 0 || output.size(0) != input.size(0) * size())
    throw DistError("all_gather on group " + name() + ": an output of " +
                    (output.dim() == 0 ? std::string("no") : std::to_string(output.size(0))) + " rows cannot hold " +
                    std::to_string(size()) + " inputs of " +
                    (input.dim() == 0 ? std::string("no") : std::to_string(input.size(0))) + " rows");
  return start_pending(state_, "all_gather", [&](dist_detail::RuntimeState& runtime) {
    c10d::AllgatherOptions options;
    options.timeout = runtime.timeout();
    // The backends receive into `output` while sending `input`: an input
    // that is a view of the output travels as a copy.
    at::Tensor source = input.is_alias_of(output) ? input.clone() : input.contiguous();
    return state_->native->_allgather_base(output, source, options);
  });
}

}  // namespace meshrun
