// meshrun is two executables with one command line (main.cpp). `meshrun`,
// the front end, links no LibTorch: loading LibTorch registers its operators
// for about a second (~475 MB resident) before main, which lint, plan, docs,
// data, tokenize, report, --help and the like never need. The commands that
// compute with tensors (run, check, generate, ckpt convert, --version) it
// hands over by exec, with the same arguments, to `meshrun-engine`: the same
// command line with LibTorch linked, which runs every command itself. On a
// machine with an NVIDIA driver the front end hands over lint and plan too,
// since they read the visible GPU's memory through LibTorch.
//
// Invariant: the front end does nothing observable before it hands over (no
// output, no files), so a handed-over command behaves exactly as if the
// engine had been started directly, with one deliberate difference: when
// neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, the engine and the
// workers it starts get PASSIVE and a spin of 10000 (engine_handoff.cpp
// says why).
#pragma once

#include <string>

#include "commands.hpp"

namespace meshrun::cli {

// The commands only the engine has.
struct EngineCommands {
  int (*run)(const std::string& recipe, const CommonOptions& common);
  int (*check)(const std::string& recipe, const CommonOptions& common);
  int (*generate)(const GenerateOptions& options);
  int (*ckpt_convert)(const CkptConvertOptions& options);
  std::string (*build_facts)();  // --version's lines after the first
};

// The engine's commands in meshrun-engine (engine_commands.cpp); nullptr in
// the front end (front_end.cpp), which hands them over instead.
const EngineCommands* engine_commands();

// Replaces this process with meshrun-engine run with `argv`. The engine is
// looked for beside this executable (the build tree, or an install that put
// both in one folder), then in the installed libexec folder. Returns only when
// it cannot be started: kFailed, after saying where it looked and why.
int hand_to_engine(char** argv);

// Whether this machine has an NVIDIA kernel driver loaded, without which
// CUDA sees no GPU: /proc/driver/nvidia/gpus has an entry or /dev/nvidiactl
// exists.
bool nvidia_driver_present();

// The memory of the GPUs this process sees (the smallest, in GiB) when the
// recipe runs on cuda without stating launch.memory_gb; else 0. Reads device
// properties only: no CUDA context is created. The front end answers 0: it
// hands lint and plan to the engine wherever a driver could show a GPU.
double visible_gpu_memory_gb(const Recipe& recipe);

}  // namespace meshrun::cli
