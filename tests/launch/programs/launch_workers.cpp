// `launch_workers WORKERS PROGRAM ARGS...`: runs PROGRAM WORKERS times under
// the local launcher and exits with the launcher's exit code. The tests use
// it to have a launcher in a process of its own, which they can kill.
#include <cstdlib>
#include <iostream>
#include <string>

#include "meshrun/launch/env.hpp"
#include "meshrun/launch/launcher.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: launch_workers WORKERS PROGRAM [ARGS...]\n";
    return 2;
  }
  const int workers = std::atoi(argv[1]);
  const std::vector<std::string> command(argv + 2, argv + argc);
  meshrun::LocalLaunchOptions options;
  options.workers = workers;
  options.show_all_ranks = true;
  options.command_for = [&](int rank) {
    return meshrun::WorkerCommand{
        command, meshrun::local_worker_environment_for(rank, rank, workers, workers, 0, "127.0.0.1", 29500)};
  };
  const auto result = meshrun::run_local_workers(options);
  if (!result.failure.empty()) std::cerr << "launch_workers: " << result.failure << "\n";
  return result.exit_code;
}
