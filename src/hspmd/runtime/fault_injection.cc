#include "hspmd/runtime/fault_injection.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "hspmd/core/error.h"

namespace hspmd::runtime {
namespace {

struct Fault {
  int rank = 0;
  int64_t step = 0;
  std::string point;
  bool stop = false;  // SIGSTOP instead of SIGKILL: the process hangs, heartbeat and all
};

const std::vector<std::string>& known_points() {
  static const std::vector<std::string> points = {"forward", "backward", "grad-sync", "optimizer", "save", "switch"};
  return points;
}

std::vector<Fault> parse(const std::string& spec) {
  std::vector<Fault> out;
  std::stringstream entries(spec);
  for (std::string entry; std::getline(entries, entry, ',');) {
    Fault f;
    char point[32] = {};
    long long step = 0;
    int consumed = 0;
    const bool parsed = std::sscanf(entry.c_str(), "%d:%lld:%31[a-z-]%n", &f.rank, &step, point, &consumed) == 3;
    f.stop = parsed && entry.substr(consumed) == ":stop";
    HSPMD_CHECK(parsed && (f.stop || consumed == static_cast<int>(entry.size())) && f.rank >= 0 && step >= 1)
        << "HSPMD_FAULT entry '" << entry << "': expected RANK:STEP:POINT[:stop], e.g. 2:4:backward";
    f.step = step;
    f.point = point;
    const auto& points = known_points();
    HSPMD_CHECK(std::find(points.begin(), points.end(), f.point) != points.end())
        << "HSPMD_FAULT entry '" << entry << "': unknown point '" << f.point
        << "' (forward, backward, grad-sync, optimizer, save, switch)";
    out.push_back(f);
  }
  return out;
}

// The faults of this process: none in a restarted worker.
const std::vector<Fault>& faults() {
  static const std::vector<Fault> f = [] {
    const char* spec = std::getenv("HSPMD_FAULT");
    const char* restarts = std::getenv("HSPMD_RESTART_COUNT");
    if (spec == nullptr || (restarts != nullptr && std::atoi(restarts) > 0)) return std::vector<Fault>{};
    return parse(spec);
  }();
  return f;
}

}  // namespace

void check_fault_spec() { (void)faults(); }

void fault_point(int rank, int64_t step, const std::string& point) {
  for (const Fault& f : faults()) {
    if (f.rank == rank && f.step == step && f.point == point) {
      const std::string line = "rank " + std::to_string(rank) + ": HSPMD_FAULT: " +
                               (f.stop ? "stopping myself (SIGSTOP)" : "killing myself (SIGKILL)") + " in " + point +
                               " of step " + std::to_string(step) + "\n";
      (void)!::write(2, line.data(), line.size());
      ::kill(::getpid(), f.stop ? SIGSTOP : SIGKILL);
    }
  }
}

}  // namespace hspmd::runtime
