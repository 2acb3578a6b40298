// "Did you mean" suggestions for misspelt keys and values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meshrun {

// Edit distance with adjacent transpositions counting as one edit.
int edit_distance(std::string_view a, std::string_view b);

// The closest candidate within a distance proportional to the word's length
// (case-insensitive), or nothing when none is close enough.
std::optional<std::string> closest_match(std::string_view word,
                                         const std::vector<std::string>& candidates);

}  // namespace meshrun
