// `hspmd selfcheck --quick`: every kernel check passes on this machine and the command says so;
// the micro-benchmark table is printed (its rates are not checked: they depend on the load).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cli/cli_testlib.h"

namespace hspmd::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class SelfcheckCli : public testing::CliTest {};

TEST_F(SelfcheckCli, QuickRunPassesEveryKernelCheck) {
  const testing::RunResult r = run("selfcheck --quick --threads 1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("CPU kernels against references (1 threads)"));
  for (const char* kernel : {"matmul", "attention", "rms_norm", "softmax", "cross_entropy"}) {
    EXPECT_THAT(r.out, HasSubstr(kernel)) << kernel;
  }
  EXPECT_THAT(r.out, Not(HasSubstr("FAIL")));
  EXPECT_THAT(r.out, HasSubstr("all 11 kernel checks passed"));
}

}  // namespace
}  // namespace hspmd::cli
