// --split parsing: comma-separated GiB amounts, refused by name when malformed.
#include "coordinator/planner/byte_units.h"

#include "gtest/gtest.h"

namespace exl3 {
namespace {

TEST(ParseGibList, ReadsCommaSeparatedAmounts) {
  auto v = parse_gib_list("20,24.5,0");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<double>{20.0, 24.5, 0.0}));
  EXPECT_EQ(gib_to_bytes((*v)[1]), uint64_t{24} * kGiB + kGiB / 2);
}

TEST(ParseGibList, RefusesWhatIsNotAnAmount) {
  for (const char* bad : {"1,x", "-1", "1,,2", "", "inf", "nan"}) {
    auto v = parse_gib_list(bad);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_NE(std::string(v.status().message()).find("--split"), std::string::npos) << v.status();
  }
}

}  // namespace
}  // namespace exl3
