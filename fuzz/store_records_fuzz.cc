// Values read back from the run's store (comm/store_values.h, elastic/store_records.h): whoever can
// write the store can put any bytes under a key; the parsers must refuse them with an Error.
#include "fuzz/fuzz_input.h"
#include "hspmd/comm/store_values.h"
#include "hspmd/elastic/store_records.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = hspmd::fuzz::as_text(data, size);
  hspmd::fuzz::expect_clean([&] { (void)hspmd::comm::parse_rank_list(text, "gen1/members"); });
  (void)hspmd::comm::death_notice_text(text, "dead/0");
  hspmd::fuzz::expect_clean([&] { (void)hspmd::elastic::parse_step_totals(text, "gen0/commit/1"); });
  hspmd::fuzz::expect_clean([&] { (void)hspmd::elastic::parse_plan_record(text, "gen1/plan"); });
  hspmd::fuzz::expect_clean([&] { (void)hspmd::elastic::parse_progress_record(text, "gen1/progress"); });
  return 0;
}
