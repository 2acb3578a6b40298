// The store-level rendezvous of a job: claim this rank, announce arrival,
// wait for everyone. Group rendezvous (Gloo's, NCCL's) happens later under
// their own key prefixes.
//
// Invariants: a rank is claimed by exactly one process ("claim/<rank>" is
// written with compare-and-set, holding "<host> pid <pid>"); nothing is
// written under a rank before its claim succeeded; "arrived/<rank>" exists
// only for claimed ranks.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "job_keys.hpp"
#include "store_client.hpp"

namespace meshrun::dist_detail {

// "<hostname> pid <pid>": who holds a rank, for messages.
std::string process_identity();

// Throws DistError naming the holder when another process has this rank.
void claim_rank(StoreClient& store, const JobKeys& keys, int rank, const std::string& identity);

void announce_arrival(StoreClient& store, const JobKeys& keys, int rank, const std::string& identity);

// Waits until every rank of the world has arrived, at most until `deadline`;
// throws DistError naming those that did not:
// "rendezvous timed out after 10 s: ranks 2, 3 of 4 never arrived (master
// 127.0.0.1:29500)".
void wait_for_arrivals(StoreClient& store, const JobKeys& keys, int world_size, Clock::time_point deadline,
                       std::chrono::milliseconds timeout, const std::string& master);

// Every rank of a job runs one recipe: each rank but 0 publishes its
// resolved keys (before it announces its arrival), rank 0 compares them with
// its own once all have arrived and publishes a verdict, and every rank
// throws the same DistError when one differs, naming the ranks and the first
// keys that differ (two models, two batch sizes: a crash in the first
// collective, or a silently inconsistent run). Empty keys: no check (a
// process that runs no recipe).
void publish_recipe(StoreClient& store, const JobKeys& keys, int rank, const std::string& recipe_keys);
void agree_on_recipe(StoreClient& store, const JobKeys& keys, int rank, int world_size,
                     const std::string& recipe_keys, Clock::time_point deadline);

std::string format_missing_arrivals(const std::vector<int>& missing, int world_size,
                                    std::chrono::milliseconds timeout, const std::string& master);

}  // namespace meshrun::dist_detail
