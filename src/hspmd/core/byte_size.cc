#include "hspmd/core/byte_size.h"

#include <cmath>
#include <cstdio>
#include <exception>

#include "hspmd/core/error.h"

namespace hspmd {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024 && u < 4) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

int64_t parse_bytes(const std::string& text, const std::string& where) {
  size_t pos = 0;
  double value = 0;
  try {
    value = std::stod(text, &pos);
  } catch (const std::exception&) {
    HSPMD_THROW() << where << ": expected bytes or a size like \"64MiB\", got \"" << text << "\"";
  }
  while (pos < text.size() && text[pos] == ' ') ++pos;
  const std::string unit = text.substr(pos);
  double scale = 0;
  if (unit == "B") scale = 1;
  else if (unit == "KiB") scale = 1024.0;
  else if (unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "GiB") scale = 1024.0 * 1024 * 1024;
  HSPMD_CHECK(scale > 0) << where << ": unknown unit \"" << unit << "\" in \"" << text
                         << "\" (use B, KiB, MiB or GiB)";
  const double bytes = value * scale;
  // stod accepts "nan", "inf" and negatives; none of them is a size.
  HSPMD_CHECK(std::isfinite(bytes) && bytes >= 1 && bytes < 9.0e18)
      << where << ": must be a positive size, got \"" << text << "\"";
  return static_cast<int64_t>(std::llround(bytes));
}

}  // namespace hspmd
