// Lists of ints written as runs of evenly spaced values: the notation of device groups ("[0-3,8]",
// "[0-4064/32]"), of a strategy file's ranks ("0-3,8") and of the layers in `hspmd explain` ("0-6",
// "{4..5,9}"), and the lookup of a value's position that runs of consecutive values make cheap.
// A data-parallel group of thousands of ranks, one from each pipeline, is one strided run: its text
// does not grow with the ranks (written out, it made `hspmd explain` quadratic in them).
//
//   runs_text({0, 1, 2, 3, 8})    == "0-3,8"
//   runs_text({0, 32, 64, 96, 1}) == "0-96/32,1"   (a-b/s: a, a + s, ..., b)
//   runs_text({0, 2, 5})          == "0,2,5"       (a step joins 3 values or more)
//   runs_text({4, 5, 9}, "..")    == "4..5,9"
//   runs_text({3, 2, 1})          == "3,2,1"       (only ascending neighbours join a run)
//
//   RunIndex where({8, 9, 10, 0, 1});
//   where.position(9) == 1;  where.position(1) == 4;  where.position(5) == -1
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hspmd::sharding {

// A run of values each one more than the one before is written first, `sep`, last; a run of 3 or
// more values each s > 1 more than the one before, first, `sep`, last, "/", s; runs and single values
// are separated by commas, runs taken greedily from the front. An empty list is "". DeviceGroup::parse
// reads the text of a group back (sharding/device_group.h).
std::string runs_text(const std::vector<int>& values, std::string_view sep = "-");
// The same text appended to `out`.
void append_runs_text(std::string& out, const std::vector<int>& values, std::string_view sep = "-");

// Positions of the values of a list, one entry per run of consecutive ascending values, so a lookup
// costs O(log runs): a device group of consecutive ranks is one entry however many ranks it holds
// (a linear scan per lookup made every per-rank pass over a plan quadratic in the ranks).
class RunIndex {
 public:
  RunIndex() = default;
  explicit RunIndex(const std::vector<int>& values);

  // Where `value` sits in the list; -1 when absent. Meaningful only for a list without repeats.
  int position(int value) const;
  // A value the list holds more than once, or nullopt.
  std::optional<int> repeated() const { return repeated_; }

 private:
  struct Run {
    int first = 0;     // its smallest value
    int length = 0;    // values first, first + 1, ..., first + length - 1
    int position = 0;  // where `first` sits in the list
  };
  std::vector<Run> runs_;  // ascending first
  std::optional<int> repeated_;
};

}  // namespace hspmd::sharding
