// The known name closest to a misspelled one, for errors that say what the user probably meant:
//
//   nearest_name("tpp", {"ranks", "layers", "tp", "cp"}) == "tp"      // one edit away
//   nearest_name("zer01", {"name", "zero1", "pipelines"}) == "zero1"
//   nearest_name("stride", {"ranks", "layers"}) == ""                 // nothing close
#pragma once

#include <string>
#include <vector>

namespace hspmd {

// Levenshtein distance (insertions, deletions, substitutions; case-sensitive).
int edit_distance(const std::string& a, const std::string& b);

// The entry of `known` nearest to `name` when it is at most max(1, |name| / 3) edits away (so a
// typo is named but an unrelated word is not), ties going to the first; "" otherwise.
std::string nearest_name(const std::string& name, const std::vector<std::string>& known);

}  // namespace hspmd
