#include "hspmd/comm/store_values.h"

#include "hspmd/core/error.h"

namespace hspmd::comm {

namespace {

// At most this much of a bad value is quoted in an error.
std::string quoted(const std::string& text) {
  std::string out;
  for (char c : text.substr(0, 60)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return "'" + out + (text.size() > 60 ? "...'" : "'");
}

}  // namespace

std::vector<int> parse_rank_list(const std::string& text, const std::string& key) {
  std::vector<int> ranks;
  size_t pos = 0;
  while (true) {
    size_t end = text.find(',', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    HSPMD_CHECK(!item.empty() && item.size() <= 7 && item.find_first_not_of("0123456789") == std::string::npos)
        << "store key " << key << " holds " << quoted(text) << ", not a comma-separated list of ranks";
    const int rank = std::stoi(item);
    HSPMD_CHECK(rank < kMaxRank) << "store key " << key << " holds rank " << rank << ", above " << kMaxRank;
    HSPMD_CHECK(ranks.empty() || rank > ranks.back())
        << "store key " << key << " holds " << quoted(text) << ": ranks not strictly increasing";
    ranks.push_back(rank);
    if (end == text.size()) break;
    pos = end + 1;
  }
  return ranks;
}

std::string death_notice_text(const std::string& text, const std::string& key) {
  bool printable = text.size() <= 200;
  for (char c : text) printable = printable && c >= 0x20 && c < 0x7f;
  if (printable) return text;
  return "a malformed notice (" + std::to_string(text.size()) + " bytes, not printable text) at store key " + key;
}

}  // namespace hspmd::comm
