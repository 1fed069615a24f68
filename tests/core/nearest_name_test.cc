#include "hspmd/core/nearest_name.h"

#include <gtest/gtest.h>

namespace hspmd {
namespace {

TEST(EditDistance, CountsInsertionsDeletionsAndSubstitutions) {
  EXPECT_EQ(edit_distance("", ""), 0);
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("abc", ""), 3);
  EXPECT_EQ(edit_distance("tp", "tpp"), 1);
  EXPECT_EQ(edit_distance("zero1", "zer01"), 1);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("ranks", "ranks"), 0);
}

TEST(NearestName, NamesATypoButNotAnUnrelatedWord) {
  const std::vector<std::string> known = {"ranks", "layers", "tp", "cp", "comment"};
  EXPECT_EQ(nearest_name("tpp", known), "tp");
  EXPECT_EQ(nearest_name("rank", known), "ranks");
  EXPECT_EQ(nearest_name("layer", known), "layers");
  EXPECT_EQ(nearest_name("stride", known), "");
  EXPECT_EQ(nearest_name("x", {}), "");
  // Ties go to the first known name: "sp" is one edit from both "tp" and "cp".
  EXPECT_EQ(nearest_name("sp", known), "tp");
}

}  // namespace
}  // namespace hspmd
