// The built-in architectures: presets ("builtin:tiny", "builtin:small") for
// tests and examples, and a table of common public models so that a plan can
// be made for "meta-llama/Llama-2-70b-hf" without downloading it.
//
// Names match case-insensitively on the part after the last '/', ignoring the
// organisation-like "meta-" prefix and variant words (-hf, -chat, -instruct,
// -base) that do not change the shape.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshrun/arch/architecture.hpp"

namespace meshrun::arch_detail {

inline constexpr std::string_view kPresetPrefix = "builtin:";

// "builtin:tiny" / "builtin:small"; nullopt for any other name.
std::optional<Architecture> builtin_preset(std::string_view name);

// A public model by name ("Qwen/Qwen2.5-7B-Instruct"); nullopt if unknown.
std::optional<Architecture> builtin_public_architecture(std::string_view name);

// The canonical names: presets first, then the public table.
std::vector<std::string> builtin_architecture_names();

// The key both the table and a user's name are reduced to before comparing.
std::string normalized_model_name(std::string_view name);

}  // namespace meshrun::arch_detail
