// Lists of ints written as runs of consecutive values: the notation of device groups ("[0-3,8]"),
// of a strategy file's ranks ("0-3,8") and of the layers in `hspmd explain` ("0-6", "{4..5,9}").
//
//   runs_text({0, 1, 2, 3, 8}) == "0-3,8"
//   runs_text({4, 5, 9}, "..") == "4..5,9"
//   runs_text({3, 2, 1})       == "3,2,1"   (only ascending neighbours join a run)
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hspmd::sharding {

// A run of values each one more than the one before is written first, `sep`, last; runs and single
// values are separated by commas. An empty list is "".
std::string runs_text(const std::vector<int>& values, std::string_view sep = "-");

}  // namespace hspmd::sharding
