// One error vocabulary: every failure meshrun throws is a meshrun::Error
// with a kind (what went wrong: the recipe, the data, a file, the
// distributed job, a hook, a model, or meshrun itself) and, when a recipe
// key is the cause, that key and the rule it breaks, so a failure found at
// run time prints like the lint diagnostic it would have been.
//
// Subsystems derive their own error types from KindError<kind> (DataError,
// HookError, DistError, ...); callers that only report can catch Error, or
// std::runtime_error, its base. describe_failure() is the one way a
// failure is turned into text for the user.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace meshrun {

struct Recipe;

enum class ErrorKind { config, data, io, dist, hook, model, internal };

// "config", "data", ...
const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, std::string recipe_key = {}, std::string rule = {});

  ErrorKind kind() const noexcept { return kind_; }
  // The dotted recipe key that caused the failure ("batch.rollout"), or empty.
  const std::string& recipe_key() const noexcept { return recipe_key_; }
  // The rule id it breaks (as lint names rules), or empty.
  const std::string& rule() const noexcept { return rule_; }

 private:
  ErrorKind kind_;
  std::string recipe_key_;
  std::string rule_;
};

// An Error of a fixed kind: the base of the subsystems' error types.
template <ErrorKind Kind>
class KindError : public Error {
 public:
  explicit KindError(const std::string& message, std::string recipe_key = {}, std::string rule = {})
      : Error(Kind, message, std::move(recipe_key), std::move(rule)) {}
};

// A run-time failure caused by a recipe key (e.g. a prompt file with fewer
// prompts than one rollout batch).
using ConfigError = KindError<ErrorKind::config>;

// The text of a failure: an Error caused by a recipe key is formatted as a
// lint diagnostic at that key's location in `recipe` ("FILE:LINE:COL:
// error: message [rule]"); any other Error as "KIND error: message"; any
// other exception by its what().
std::string describe_failure(const std::exception& error, const Recipe* recipe);

// A whole text file read with a bound: every file meshrun reads comes from
// users, and a path naming a device (/dev/zero), a pipe or the wrong file
// must end in an error, not unbounded memory or a wait for ever. Reading
// stops after max_bytes + 1 bytes; a FIFO or socket is refused before any
// read. The caller turns a failure into its own error type.
struct BoundedText {
  enum class Status { ok, unreadable, too_large, not_a_file };
  Status status = Status::ok;
  std::string text;
  bool ok() const { return status == Status::ok; }
  // "cannot be read" or "is larger than N MiB"; empty when ok.
  std::string problem(std::size_t max_bytes) const;
};
BoundedText read_bounded(const std::string& path, std::size_t max_bytes);
// Whether anything stands at `path`, a link included even where it points
// nowhere: an optional file of a folder (tokenizer_config.json,
// generation_config.json) that is present this way is read, and a dangling
// link (a half-downloaded hub snapshot), a directory or a pipe then fails
// that read with its reason, instead of counting as absent and the run
// silently going on with defaults.
bool path_present(const std::string& path);

}  // namespace meshrun
