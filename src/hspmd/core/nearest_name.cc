#include "hspmd/core/nearest_name.h"

#include <algorithm>

namespace hspmd {

int edit_distance(const std::string& a, const std::string& b) {
  // One row of the dynamic-programming table at a time: row[j] = distance(a[0:i], b[0:j]).
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string nearest_name(const std::string& name, const std::vector<std::string>& known) {
  const int limit = std::max(1, static_cast<int>(name.size()) / 3);
  std::string best;
  int best_distance = limit + 1;
  for (const std::string& k : known) {
    const int d = edit_distance(name, k);
    if (d < best_distance) {
      best = k;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace hspmd
