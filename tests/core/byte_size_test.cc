// Byte sizes printed and parsed: whole bytes below 1 KiB, two decimals in the largest binary unit
// above, and a parser that takes B/KiB/MiB/GiB and names the key for anything else.
#include "hspmd/core/byte_size.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "error_of.h"

namespace hspmd {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

TEST(ByteSize, FormatsInTheLargestUnitAtLeastOne) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(256.0 * 1024 * 1024), "256.00 MiB");
  EXPECT_EQ(format_bytes(1.5 * 1024 * 1024 * 1024), "1.50 GiB");
  EXPECT_EQ(format_bytes(2048.0 * 1024 * 1024 * 1024 * 1024), "2048.00 TiB");  // TiB is the largest unit
}

TEST(ByteSize, ParsesUnitsWithOrWithoutASpace) {
  EXPECT_EQ(parse_bytes("4096B", "m"), 4096);
  EXPECT_EQ(parse_bytes("3 KiB", "m"), 3 * 1024);
  EXPECT_EQ(parse_bytes("64MiB", "m"), 64 * 1024 * 1024);
  EXPECT_EQ(parse_bytes("1.5GiB", "m"), int64_t{3} << 29);
  // What it prints, it reads back (to the printed precision).
  EXPECT_EQ(parse_bytes(format_bytes(1536), "m"), 1536);
}

TEST(ByteSize, RefusesWhatIsNotAPositiveSizeNamingTheKey) {
  EXPECT_THAT(error_of([] { parse_bytes("64 MB", "devices[0].memory"); }),
              HasSubstr("devices[0].memory: unknown unit \"MB\" in \"64 MB\" (use B, KiB, MiB or GiB)"));
  EXPECT_THAT(error_of([] { parse_bytes("lots", "devices[0].memory"); }),
              HasSubstr("devices[0].memory: expected bytes or a size like \"64MiB\", got \"lots\""));
  for (const char* bad : {"-1MiB", "0B", "nan B", "inf GiB"}) {
    EXPECT_THAT(error_of([&] { parse_bytes(bad, "m"); }), HasSubstr("m: must be a positive size")) << bad;
  }
}

}  // namespace
}  // namespace hspmd
