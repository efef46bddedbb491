// Tests of the all-reduce mode names and checks (worker/comm/all_reduce_mode.h): nccl and oneshot
// round-trip through their names, anything else is refused naming the flag and the text, the
// one-shot limit takes 1..65536 KiB and names its flag or field otherwise, and the help texts say
// what oneshot does and where it applies.
#include <string>

#include "gtest/gtest.h"
#include "worker/comm/all_reduce_mode.h"

namespace exl3 {
namespace {

bool contains(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(AllReduceMode, NamesRoundTrip) {
  for (AllReduceMode m : {AllReduceMode::kNccl, AllReduceMode::kOneshot}) {
    const absl::StatusOr<AllReduceMode> back = parse_all_reduce_mode(all_reduce_mode_name(m), "--x");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, m);
  }
  EXPECT_EQ(all_reduce_mode_name(AllReduceMode::kNccl), "nccl");
  EXPECT_EQ(all_reduce_mode_name(AllReduceMode::kOneshot), "oneshot");
}

TEST(AllReduceMode, BadValuesNameTheFlagAndTheText) {
  for (const char* text : {"", "gloo", "NCCL", "one-shot", "oneshot "}) {
    const absl::StatusOr<AllReduceMode> bad = parse_all_reduce_mode(text, "--all-reduce");
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << text;
    const std::string message(bad.status().message());
    EXPECT_TRUE(contains(message, "--all-reduce \"" + std::string(text) + "\"")) << message;
    EXPECT_TRUE(contains(message, "nccl or oneshot")) << message;
  }
}

TEST(AllReduceMode, OneshotLimitRange) {
  for (int64_t kib : {int64_t{1}, int64_t{256}, int64_t{65536}}) {
    EXPECT_TRUE(validate_all_reduce_oneshot_max_kib(kib, "--all-reduce-oneshot-max-kib").ok()) << kib;
  }
  for (int64_t kib : {int64_t{0}, int64_t{-1}, int64_t{65537}, int64_t{1} << 40}) {
    const absl::Status s = validate_all_reduce_oneshot_max_kib(kib, "LoadShard.all_reduce_oneshot_max_kib");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << kib;
    EXPECT_TRUE(contains(std::string(s.message()), "LoadShard.all_reduce_oneshot_max_kib " + std::to_string(kib)))
        << s;
    EXPECT_TRUE(contains(std::string(s.message()), "1..65536")) << s;
  }
  EXPECT_EQ(kAllReduceOneshotDefaultMaxKib, 256);
}

TEST(AllReduceMode, HelpSaysWhatOneshotDoes) {
  EXPECT_EQ(all_reduce_flag_help(),
            "how GPU workers all-reduce in tensor parallel: nccl (default) or oneshot (parts up to 256 KiB as one "
            "kernel over NVLink/PCIe peer-to-peer memory, the rest through NCCL; all workers on one machine with "
            "peer access)");
  EXPECT_TRUE(contains(all_reduce_oneshot_max_kib_flag_help(), "1..65536")) << all_reduce_oneshot_max_kib_flag_help();
  EXPECT_TRUE(contains(all_reduce_oneshot_max_kib_flag_help(), "--all-reduce oneshot"));
}

}  // namespace
}  // namespace exl3
