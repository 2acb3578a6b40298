// `meshrun check`: every group this rank holds runs barrier, all_reduce,
// all_gather and broadcast of values that depend on the members' global
// ranks, so a group wired to the wrong ranks gives a wrong number, not a
// pass. Per-rank reports are merged over the world group.
#include <chrono>
#include <sstream>

#include "meshrun/dist/mesh.hpp"
#include "meshrun/plan/plan.hpp"
#include "meshrun/recipe/recipe.hpp"
#include "runtime_state.hpp"

namespace meshrun {
namespace {

using Clock = std::chrono::steady_clock;

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (int rank : ranks) text += (text.empty() ? "" : ",") + std::to_string(rank);
  return text;
}

std::string values_text(const at::Tensor& tensor) {
  std::string text = "[";
  at::Tensor flat = tensor.cpu().to(at::kLong).flatten();
  for (int64_t i = 0; i < flat.numel(); ++i) text += (i ? ", " : "") + std::to_string(flat[i].item<int64_t>());
  return text + "]";
}

[[noreturn]] void wrong(const Group& group, const std::string& operation, const std::string& expected,
                        const std::string& got) {
  throw DistError("self-check: " + operation + " on group " + group.name() + " (ranks " + rank_list(group.ranks()) +
                  ") gave " + got + " on rank " + std::to_string(group.global_rank(group.rank())) + ", expected " +
                  expected + ": the group does not connect the ranks the plan says it does");
}

GroupCheck check_group(Group& group) {
  const auto began = Clock::now();
  const auto on_device = at::TensorOptions().dtype(at::kLong).device(c10::Device(group.device()));
  const int me = group.global_rank(group.rank());
  GroupCheck check{group.name(), group.ranks(), {}, 0};

  group.barrier();
  check.passed.push_back("barrier");

  // Each member contributes (rank + 1) * [1, 2, 3]; the sum is fixed by the
  // rank list alone.
  at::Tensor reduced = at::arange(1, 4, on_device) * (me + 1);
  group.all_reduce(reduced);
  int64_t rank_sum = 0;
  for (int rank : group.ranks()) rank_sum += rank + 1;
  at::Tensor expected_sum = at::arange(1, 4, on_device) * rank_sum;
  if (!at::equal(reduced, expected_sum)) wrong(group, "all_reduce", values_text(expected_sum), values_text(reduced));
  check.passed.push_back("all_reduce");

  // Each member contributes (global rank, group rank); slot i must hold
  // (ranks[i], i).
  at::Tensor mine = at::tensor({static_cast<int64_t>(me), static_cast<int64_t>(group.rank())}, on_device);
  std::vector<at::Tensor> gathered = group.all_gather(mine);
  for (int i = 0; i < group.size(); ++i) {
    at::Tensor expected = at::tensor({static_cast<int64_t>(group.global_rank(i)), static_cast<int64_t>(i)}, on_device);
    if (!at::equal(gathered[static_cast<size_t>(i)], expected))
      wrong(group, "all_gather (slot " + std::to_string(i) + ")", values_text(expected),
            values_text(gathered[static_cast<size_t>(i)]));
  }
  check.passed.push_back("all_gather");

  // The last member broadcasts a value derived from its global rank.
  const int source = group.size() - 1;
  const int64_t sent = 7 * static_cast<int64_t>(group.global_rank(source)) + 3;
  at::Tensor value = at::full({2}, group.rank() == source ? sent : int64_t{-1}, on_device);
  group.broadcast(value, source);
  at::Tensor expected_value = at::full({2}, sent, on_device);
  if (!at::equal(value, expected_value)) wrong(group, "broadcast", values_text(expected_value), values_text(value));
  check.passed.push_back("broadcast");

  check.seconds = std::chrono::duration<double>(Clock::now() - began).count();
  return check;
}

// One line per group: name \t ranks \t ops \t seconds.
std::string serialize(const std::vector<GroupCheck>& checks) {
  std::ostringstream out;
  for (const auto& check : checks) {
    std::string ops;
    for (const auto& op : check.passed) ops += (ops.empty() ? "" : ",") + op;
    out << check.name << '\t' << rank_list(check.ranks) << '\t' << ops << '\t' << check.seconds << '\n';
  }
  return out.str();
}

std::vector<int> parse_ranks(const std::string& text) {
  std::vector<int> ranks;
  std::istringstream in(text);
  for (std::string item; std::getline(in, item, ',');) ranks.push_back(std::stoi(item));
  return ranks;
}

std::vector<GroupCheck> deserialize(const std::string& text) {
  std::vector<GroupCheck> checks;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    GroupCheck check;
    std::string ranks, ops, seconds;
    std::getline(fields, check.name, '\t');
    std::getline(fields, ranks, '\t');
    std::getline(fields, ops, '\t');
    std::getline(fields, seconds, '\t');
    check.ranks = parse_ranks(ranks);
    std::istringstream op_list(ops);
    for (std::string op; std::getline(op_list, op, ',');) check.passed.push_back(op);
    check.seconds = std::stod(seconds);
    checks.push_back(std::move(check));
  }
  return checks;
}

}  // namespace

SelfCheckReport self_check(Runtime& runtime) {
  SelfCheckReport report;
  report.world_size = runtime.launch().world_size;
  report.backend = runtime.options().backend;
  report.device = runtime.options().device;
  report.job_prefix = runtime.job_prefix();
  report.rendezvous_seconds = runtime.state().init_seconds;
  std::vector<GroupCheck> mine;
  for (Group* group : runtime.groups()) mine.push_back(check_group(*group));

  // Merge: the same group (name and ranks) seen by several members keeps the
  // slowest member's time; order follows first appearance by rank.
  for (const std::string& text : dist::all_gather_object(serialize(mine), &runtime.world())) {
    for (GroupCheck& check : deserialize(text)) {
      auto same = std::find_if(report.groups.begin(), report.groups.end(), [&](const GroupCheck& known) {
        return known.name == check.name && known.ranks == check.ranks;
      });
      if (same == report.groups.end())
        report.groups.push_back(std::move(check));
      else
        same->seconds = std::max(same->seconds, check.seconds);
    }
  }
  // Groups of one name together (rank 0's order of names), members ascending.
  std::vector<std::string> name_order;
  for (const auto& group : report.groups)
    if (std::find(name_order.begin(), name_order.end(), group.name) == name_order.end())
      name_order.push_back(group.name);
  std::stable_sort(report.groups.begin(), report.groups.end(), [&](const GroupCheck& a, const GroupCheck& b) {
    const auto a_at = std::find(name_order.begin(), name_order.end(), a.name);
    const auto b_at = std::find(name_order.begin(), name_order.end(), b.name);
    return a_at != b_at ? a_at < b_at : a.ranks < b.ranks;
  });
  return report;
}

SelfCheckReport self_check(const Recipe& recipe, const Plan& plan, const LaunchInfo& launch,
                           const Environment& environment) {
  auto runtime = Runtime::init(launch, dist_options_from(recipe, launch, environment));
  runtime->build_groups(plan);
  SelfCheckReport report = self_check(*runtime);
  // The merge above was the last collective: every rank has its report.
  runtime->shutdown("finished");
  return report;
}

std::string format_self_check_report(const SelfCheckReport& report) {
  std::ostringstream out;
  out << "world of " << report.world_size << " on " << report.device << " with " << report.backend << " ("
      << build_description() << "), store keys under " << report.job_prefix << "\n";
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.2f", report.rendezvous_seconds);
  out << "rendezvous and world group: " << seconds << " s\n";
  size_t name_width = 0, ranks_width = 0;
  for (const auto& group : report.groups) {
    name_width = std::max(name_width, group.name.size());
    ranks_width = std::max(ranks_width, rank_list(group.ranks).size());
  }
  for (const auto& group : report.groups) {
    std::string ops;
    for (const auto& op : group.passed) ops += (ops.empty() ? "" : " ") + op;
    const std::string ranks = rank_list(group.ranks);
    std::snprintf(seconds, sizeof seconds, "%.3f", group.seconds);
    out << "  " << group.name << std::string(name_width - group.name.size() + 2, ' ') << "ranks " << ranks
        << std::string(ranks_width - ranks.size() + 2, ' ') << "ok: " << ops << "  " << seconds << " s\n";
  }
  out << report.groups.size() << " group" << (report.groups.size() == 1 ? "" : "s") << " checked, all passed\n";
  return out.str();
}

}  // namespace meshrun
