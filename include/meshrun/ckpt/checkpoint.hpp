// Checkpoint directories: where a run's checkpoints live, how one is
// committed atomically, found again, verified and rotated. Torch-free: the
// trainers decide what goes into the files (src/train/*_checkpoint.cpp).
//
// Layout under `[checkpoint] path`:
//   global_step_N/            a complete checkpoint: its files and
//     manifest.json           (format version, step, recipe hash, world
//                             layout, and the size and xxh3-64 checksum of
//                             every other file), written last
//   .partial-global_step_N/   a checkpoint being written
//
// Commit protocol: every rank writes its files into the partial directory
// (each file by temporary name, fsync, rename); after a barrier one rank
// calls commit(), which checksums the files, writes the manifest the same
// way, fsyncs the directory and renames it to global_step_N, then fsyncs
// the parent. A crash at any moment leaves either the previous checkpoints
// alone or the new one complete; a partial directory is ignored, and
// removed by remove_partials() at the next start. A directory counts as a
// checkpoint only with a readable manifest; verify() rereads every file,
// verify_file() one of them (at resume each rank checks the files it reads).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>
#include "meshrun/error.hpp"

namespace meshrun {

class CheckpointError : public KindError<ErrorKind::io> {
 public:
  using KindError::KindError;
};

struct CheckpointFileInfo {
  std::string name;  // relative to the checkpoint directory
  int64_t bytes = 0;
  std::string xxh3;  // 16 hex digits
};

struct CheckpointManifest {
  static constexpr int kFormatVersion = 1;
  int format_version = kFormatVersion;
  int64_t global_step = 0;
  std::string algorithm;
  std::string recipe_hash;
  // The world layout the per-rank files belong to, e.g.
  // "world 2; actor dp 2 tp 1 zero 0" (resuming needs the same one).
  std::string layout;
  std::vector<CheckpointFileInfo> files;
  int64_t total_bytes() const;

  std::string to_json() const;
  static CheckpointManifest from_json(const std::string& text, const std::string& where);  // throws CheckpointError
};

// xxh3-64 of a file's bytes, streamed (hex). Throws CheckpointError.
std::string file_checksum(const std::string& path);
// fsync of a file or a directory. Throws CheckpointError.
void fsync_path(const std::string& path);
// Temporary file beside `path`, fsync, rename: the file appears whole or not
// at all. Throws CheckpointError.
void write_file_atomically(const std::string& path, const std::string& text);
// Whether `inner` is `outer` or a folder below it, by their absolute,
// normalised forms (neither need exist): nothing but a checkpoint's own
// files may be written there (lint's plan.output-folder, ckpt convert).
bool path_is_within(const std::string& inner, const std::string& outer);

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string root) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }

  std::string partial_path(int64_t step) const;  // root/.partial-global_step_N
  std::string final_path(int64_t step) const;    // root/global_step_N
  // Creates an empty partial directory for `step` (removing a stale one).
  std::string begin(int64_t step) const;
  // Seals the partial directory (see the top of this file): the manifest
  // gets `info`'s fields plus every file found there. Replaces an existing
  // global_step_N (a rerun of the same step).
  CheckpointManifest commit(int64_t step, CheckpointManifest info) const;

  // Steps of the complete checkpoints (manifest present), ascending.
  std::vector<int64_t> complete_steps() const;
  CheckpointManifest manifest(int64_t step) const;  // throws CheckpointError
  // Empty when every file of the manifest is there with its size and
  // checksum and nothing else is; otherwise what is wrong.
  std::string verify(int64_t step) const;
  // Empty when the checkpoint holds no file its manifest does not list (a
  // listing, nothing read); otherwise that file. Readers take every rank
  // file they find, so an unlisted one would be read unchecked.
  std::string unlisted_file(int64_t step) const;
  // The same for one file of the manifest (each rank checks the files it
  // reads, in parallel); a name the manifest does not list is a problem.
  std::string verify_file(int64_t step, const std::string& name) const;
  // Removes the partial directories a crash left; returns their names.
  std::vector<std::string> remove_partials() const;
  // Moves every complete checkpoint into a new folder root/`folder_name`
  // (no longer a checkpoint of this directory, nothing deleted) and
  // returns that folder's path, or empty when there was none: a run that
  // starts afresh (checkpoint.load = "never") in a directory of another
  // run's checkpoints would otherwise be rotated by step number against
  // them (its own first checkpoints deleted, the old run's later ones
  // kept and resumed by the next "auto"). Throws CheckpointError.
  std::string set_aside_complete(const std::string& folder_name) const;
  // Deletes the oldest complete checkpoints until at most keep_last remain
  // (<= 0: no count limit) and they total at most max_bytes (<= 0: no size
  // limit); the newest is never deleted. Returns the deleted steps.
  std::vector<int64_t> rotate(int keep_last, int64_t max_bytes) const;

  // The checkpoint to resume from under `policy`: "never" → none; "auto" →
  // the newest that verifies (each one that does not is reported in
  // `warnings` and skipped), none when there is none; "require" → the same,
  // but none is a CheckpointError.
  std::optional<int64_t> choose(const std::string& policy, std::vector<std::string>& warnings) const;

 private:
  std::string root_;
};

// A checkpoint directory's root and step when `path` is one complete
// checkpoint (.../global_step_N with its manifest); nullopt otherwise.
std::optional<std::pair<std::string, int64_t>> as_checkpoint(const std::string& path);

}  // namespace meshrun
