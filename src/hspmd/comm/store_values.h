// Parsers of the values workers and launchers read back from the run's store. Whoever can write
// the store (a bug, a stale process, a stranger on an open Redis) can put any bytes under a key, so
// each parser accepts exactly what hspmd writes and otherwise throws an Error naming the key.
//
//   parse_rank_list("0,2,3", "gen1/members")        // {0, 2, 3}
//   parse_rank_list("2,x", "gen1/members")          // Error: store key gen1/members holds '2,x', ...
//   death_notice_text("signal 9 (Killed)", "dead/3") // printable text is kept as it is
#pragma once

#include <string>
#include <vector>

namespace hspmd::comm {

// Ranks above this are refused: no run has a million processes, and the bound keeps a forged list
// from sizing vectors.
inline constexpr int kMaxRank = 1 << 20;

// A member list as group_key() writes it: decimal ranks, comma separated, strictly increasing,
// at least one, each below kMaxRank.
std::vector<int> parse_rank_list(const std::string& text, const std::string& key);

// A launcher's death notice, for messages: printable ASCII up to 200 bytes is returned as it is;
// anything else (control characters that could rewrite a terminal, a huge value) is replaced by a
// description naming the key. The notice counts as a death either way: its key exists.
std::string death_notice_text(const std::string& text, const std::string& key);

}  // namespace hspmd::comm
