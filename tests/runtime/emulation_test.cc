// Emulated devices: the shipped examples parse to the documented speeds and capacities, every bad
// input is refused with an error naming the source and the key, describe() is the log line, and
// ComputePacer stretches the CPU time of compute to 1/speed, less the wall time already spent (timing
// checked with generous bounds).
#include "hspmd/runtime/compute_pacer.h"
#include "hspmd/runtime/emulation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "hspmd/core/allocator.h"
#include "hspmd/core/error.h"
#include "runtime/runtime_testlib.h"

namespace hspmd::runtime {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::source_dir;

constexpr int64_t kMiB = 1024 * 1024;

std::string example(const std::string& name) { return (source_dir() / "examples/devices" / name).string(); }

EmulatedDevices parse(const std::string& devices, int world_size = 4) {
  return EmulatedDevices::from_json_text("{\"devices\": [" + devices + "]}", "d.json", world_size);
}

std::string parse_error(const std::string& devices, int world_size = 4) {
  return error_of([&] { parse(devices, world_size); });
}

TEST(EmulatedDevicesTest, DefaultIsFullSpeedUnlimited) {
  EmulatedDevices devs(3);
  ASSERT_EQ(devs.world_size(), 3);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(devs.of(r).rank, r);
    EXPECT_EQ(devs.of(r).name, "rank" + std::to_string(r));
    EXPECT_EQ(devs.of(r).speed, 1.0);
    EXPECT_EQ(devs.of(r).memory_bytes, 0);
  }
  EXPECT_THAT(error_of([&] { devs.of(3); }), HasSubstr("rank 3 is out of range [0, 3)"));
  EXPECT_THAT(error_of([&] { devs.of(-1); }), HasSubstr("rank -1 is out of range"));
  EXPECT_THAT(error_of([] { EmulatedDevices bad(0); }), HasSubstr("world size must be positive"));
}

TEST(EmulatedDevicesTest, ShippedHeteroExample) {
  EmulatedDevices devs = EmulatedDevices::from_file(example("local-hetero-4.json"), 4);
  for (int r : {0, 1}) {
    EXPECT_EQ(devs.of(r).name, "fast");
    EXPECT_EQ(devs.of(r).speed, 1.0);
  }
  for (int r : {2, 3}) {
    EXPECT_EQ(devs.of(r).name, "slow");
    EXPECT_DOUBLE_EQ(devs.of(r).speed, 0.333);
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(devs.of(r).memory_bytes, 256 * kMiB);
  EXPECT_EQ(devs.describe(),
            "emulated devices: rank 0 fast speed 1.00 memory 256.00 MiB; rank 1 fast speed 1.00 memory 256.00 MiB; "
            "rank 2 slow speed 0.33 memory 256.00 MiB; rank 3 slow speed 0.33 memory 256.00 MiB");
}

TEST(EmulatedDevicesTest, TinyMemoryExampleCapsTheAllocator) {
  // Ranks absent from the file (1 here) keep the defaults.
  EmulatedDevices devs = EmulatedDevices::from_file(example("tiny-memory.json"), 2);
  ASSERT_EQ(devs.of(0).memory_bytes, kMiB);
  EXPECT_EQ(devs.of(1).memory_bytes, 0);
  Allocator alloc(Allocator::Options{.capacity_bytes = static_cast<size_t>(devs.of(0).memory_bytes), .name = "rank 0"});
  void* p = alloc.allocate(512 * 1024);
  EXPECT_THROW(alloc.allocate(768 * 1024), OutOfMemoryError);
  alloc.deallocate(p, 512 * 1024);
}

TEST(EmulatedDevicesTest, MemoryUnitsAndDefaults) {
  EmulatedDevices devs = parse(
      R"({"rank": 0, "memory": 4096}, {"rank": 1, "memory": "1.5GiB"}, {"rank": 2, "memory": "3 KiB"},)"
      R"({"rank": 3, "memory": "100B", "speed": 0.5})");
  EXPECT_EQ(devs.of(0).memory_bytes, 4096);
  EXPECT_EQ(devs.of(0).speed, 1.0);
  EXPECT_EQ(devs.of(0).name, "rank0");
  EXPECT_EQ(devs.of(1).memory_bytes, 3 * kMiB * 512);
  EXPECT_EQ(devs.of(2).memory_bytes, 3 * 1024);
  EXPECT_EQ(devs.of(3).memory_bytes, 100);
  EXPECT_EQ(devs.describe(),
            "emulated devices: rank 0 rank0 speed 1.00 memory 4.00 KiB; rank 1 rank1 speed 1.00 memory 1.50 GiB; "
            "rank 2 rank2 speed 1.00 memory 3.00 KiB; rank 3 rank3 speed 0.50 memory 100 B");
  EXPECT_THAT(EmulatedDevices(1).describe(), HasSubstr("rank 0 rank0 speed 1.00 memory unlimited"));
}

TEST(EmulatedDevicesTest, BadInputNamesSourceAndKey) {
  EXPECT_THAT(parse_error(R"({"rank": 4})"), HasSubstr("d.json: devices[0].rank: 4 is out of range [0, 4)"));
  EXPECT_THAT(parse_error(R"({"rank": -1})"), HasSubstr("d.json: devices[0].rank: -1 is out of range"));
  EXPECT_THAT(parse_error(R"({"rank": 1}, {"rank": 1})"), HasSubstr("d.json: devices[1].rank: rank 1 is listed twice"));
  EXPECT_THAT(parse_error(R"({"rank": "1"})"), HasSubstr("devices[0].rank: expected an integer"));
  EXPECT_THAT(parse_error(R"({"name": "x"})"), HasSubstr("devices[0]: missing required key \"rank\""));
  EXPECT_THAT(parse_error(R"({"rank": 0, "speed": 3})"), HasSubstr("d.json: devices[0].speed: must be in (0, 1], got 3"));
  EXPECT_THAT(parse_error(R"({"rank": 0, "speed": 0})"), HasSubstr("devices[0].speed: must be in (0, 1], got 0"));
  EXPECT_THAT(parse_error(R"({"rank": 0, "speed": "fast"})"), HasSubstr("devices[0].speed: expected a number"));
  EXPECT_THAT(parse_error(R"({"rank": 0, "name": ""})"), HasSubstr("devices[0].name: expected a non-empty string"));
  EXPECT_THAT(parse_error(R"({"rank": 0, "sped": 0.5})"), HasSubstr("devices[0].sped: unknown key"));
  EXPECT_THAT(parse_error(R"({"rank": 0, "memory": "64MB"})"), HasSubstr("devices[0].memory: unknown unit \"MB\""));
  EXPECT_THAT(parse_error(R"({"rank": 0, "memory": "lots"})"), HasSubstr("devices[0].memory: expected bytes or a size"));
  EXPECT_THAT(parse_error(R"({"rank": 0, "memory": "-1MiB"})"), HasSubstr("devices[0].memory: must be a positive size"));
  EXPECT_THAT(parse_error(R"({"rank": 0, "memory": 0})"), HasSubstr("devices[0].memory: expected a positive number"));
  EXPECT_THAT(parse_error(R"({"rank": 0, "memory": 1.5})"), HasSubstr("devices[0].memory: expected a positive number"));
  EXPECT_THAT(parse_error("3"), HasSubstr("d.json: devices[0]: expected an object"));
  EXPECT_THAT(error_of([] { EmulatedDevices::from_json_text("{\"devices\": {}}", "d.json", 2); }),
              HasSubstr("d.json: devices: expected an array"));
  EXPECT_THAT(error_of([] { EmulatedDevices::from_json_text("{}", "d.json", 2); }),
              HasSubstr("d.json: missing required key \"devices\""));
  EXPECT_THAT(error_of([] { EmulatedDevices::from_json_text("{\"devices\": [", "d.json", 2); }),
              HasSubstr("d.json: not valid JSON"));
  EXPECT_THAT(error_of([] { EmulatedDevices::from_file("/nonexistent/devs.json", 2); }),
              HasSubstr("cannot open devices file /nonexistent/devs.json"));
}

double seconds_of(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ComputePacerTest, PadsCpuTimeToInverseSpeedLessTheWallTimeSpent) {
  // speed 0.5: 20 ms of work must take 40 ms; 20 ms already passed, so 20 ms remain.
  EXPECT_DOUBLE_EQ(ComputePacer(0.5).padding({.cpu = 0.020, .wall = 0.020}), 0.020);
  // A rank that waited 30 ms for a core spent 50 ms on 20 ms of work: only 40 - 50 < 0 remains.
  // Stretching the wall time instead would have slept 50 ms and counted the wait twice.
  EXPECT_DOUBLE_EQ(ComputePacer(0.5).padding({.cpu = 0.020, .wall = 0.050}), 0.0);
  EXPECT_DOUBLE_EQ(ComputePacer(0.25).padding({.cpu = 0.010, .wall = 0.015}), 0.025);
  EXPECT_DOUBLE_EQ(ComputePacer(1.0).padding({.cpu = 0.010, .wall = 0.010}), 0.0);
}

// Burns about `seconds` of this thread's CPU time.
void spin_cpu(double seconds) {
  const ComputeClock start = ComputeClock::now();
  volatile double x = 1;
  while (ComputeClock::now().since(start).cpu < seconds) x = x * 1.0000001 + 1e-9;
}

TEST(ComputePacerTest, SpansAccumulateUntilPadAndThenReset) {
  ComputePacer quarter(0.25);
  quarter.begin();
  spin_cpu(0.010);
  quarter.end();
  quarter.begin();
  spin_cpu(0.010);
  quarter.end();
  EXPECT_GE(quarter.total().cpu, 0.020);
  EXPECT_GE(quarter.total().wall, quarter.total().cpu * 0.999);
  // 20 ms of CPU at a quarter of the speed: 80 ms in all, about 60 ms of it slept.
  const double slept = seconds_of([&] { quarter.pad(); });
  EXPECT_GE(slept, 0.080 - quarter.total().wall - 0.002);
  EXPECT_LT(slept, 0.060 + 0.200);
  // The account starts again: nothing left to pad, and the total keeps the compute only.
  // (The slack, like the others here, is for a thread that waits for a core on a loaded host.)
  EXPECT_LT(seconds_of([&] { quarter.pad(); }), 0.050 + 0.200);
  EXPECT_LT(quarter.total().cpu, 0.020 + 0.050);
}

TEST(ComputePacerTest, FullSpeedDoesNotSleep) {
  ComputePacer full;
  EXPECT_EQ(full.speed(), 1.0);
  full.begin();
  spin_cpu(0.005);
  full.end();
  EXPECT_LT(seconds_of([&] { full.pad(); }), 0.002 + 0.200);
  ComputePacer idle(0.1);
  EXPECT_LT(seconds_of([&] { idle.pad(); }), 0.200);  // nothing bracketed: nothing to stretch
}

TEST(ComputePacerTest, RejectsBadArguments) {
  EXPECT_THAT(error_of([] { ComputePacer p(0.0); }), HasSubstr("speed must be in (0, 1], got 0"));
  EXPECT_THAT(error_of([] { ComputePacer p(1.5); }), HasSubstr("speed must be in (0, 1], got 1.5"));
  EXPECT_THAT(error_of([] { ComputePacer(0.5).padding({.cpu = -1.0, .wall = 0}); }),
              HasSubstr("compute times must be finite"));
}

}  // namespace
}  // namespace hspmd::runtime
