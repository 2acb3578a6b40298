#include "meshrun/hooks/hooks.hpp"

namespace meshrun {
namespace {

std::string describe(const std::string& script, int line, const std::string& hook_point,
                     const std::string& message, const std::string& traceback) {
  std::string text = script;
  if (line > 0) text += ":" + std::to_string(line);
  text += ": in hook point '" + hook_point + "': " + message;
  if (!traceback.empty()) text += "\n" + traceback;
  return text;
}

}  // namespace

HookError::HookError(std::string script, int line, std::string hook_point, std::string message,
                     std::string traceback)
    : KindError(describe(script, line, hook_point, message, traceback)),
      script_(std::move(script)),
      line_(line),
      hook_point_(std::move(hook_point)),
      message_(std::move(message)),
      traceback_(std::move(traceback)) {}

}  // namespace meshrun
