// The serving flags as exl3-launch and exl3-coordinator parse them (coordinator/server/
// serving_flags.h), through CLI11 and apply_serving_flags: --all-reduce and
// --all-reduce-oneshot-max-kib default to nccl and 256 KiB, take nccl / oneshot and 1..65536, and
// a bad value is INVALID_ARGUMENT naming the flag and the value; --help lists both.
#include <string>

#include "CLI/CLI.hpp"
#include "coordinator/server/serving_flags.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

struct Parsed {
  CoordinatorOptions options;
  absl::Status status;
};

// Parses `args` (no program name) as the mains do; CLI11's own errors fail the test.
Parsed parse(const std::string& args) {
  CLI::App app{"serving flags test"};
  Parsed p;
  ServingFlagText text;
  add_serving_flags(app, p.options, text);
  try {
    app.parse(args, /*program_name_included=*/false);
  } catch (const CLI::ParseError& e) {
    ADD_FAILURE() << args << ": CLI11 refused: " << e.what();
    return p;
  }
  p.status = apply_serving_flags(text, p.options);
  return p;
}

TEST(ServingFlags, AllReduceDefaultsToNccl) {
  const Parsed p = parse("");
  ASSERT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.options.all_reduce, AllReduceMode::kNccl);
  EXPECT_EQ(p.options.all_reduce_oneshot_max_kib, 256);
}

TEST(ServingFlags, AllReduceGoodValues) {
  Parsed p = parse("--all-reduce oneshot");
  ASSERT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.options.all_reduce, AllReduceMode::kOneshot);
  EXPECT_EQ(p.options.all_reduce_oneshot_max_kib, 256);

  p = parse("--all-reduce nccl");
  ASSERT_TRUE(p.status.ok()) << p.status;
  EXPECT_EQ(p.options.all_reduce, AllReduceMode::kNccl);

  for (int kib : {1, 64, 65536}) {
    p = parse("--all-reduce oneshot --all-reduce-oneshot-max-kib " + std::to_string(kib));
    ASSERT_TRUE(p.status.ok()) << kib << ": " << p.status;
    EXPECT_EQ(p.options.all_reduce, AllReduceMode::kOneshot);
    EXPECT_EQ(p.options.all_reduce_oneshot_max_kib, kib);
  }
}

TEST(ServingFlags, BadAllReduceNamesTheFlagAndTheValue) {
  const Parsed p = parse("--all-reduce nvlink");
  EXPECT_EQ(p.status.code(), absl::StatusCode::kInvalidArgument) << p.status;
  const std::string message(p.status.message());
  EXPECT_NE(message.find("--all-reduce \"nvlink\""), std::string::npos) << message;
  EXPECT_NE(message.find("nccl or oneshot"), std::string::npos) << message;
}

TEST(ServingFlags, OneshotLimitOutsideItsRangeNamesTheFlag) {
  for (const char* kib : {"0", "-4", "65537"}) {
    const Parsed p = parse(std::string("--all-reduce oneshot --all-reduce-oneshot-max-kib ") + kib);
    EXPECT_EQ(p.status.code(), absl::StatusCode::kInvalidArgument) << kib << ": " << p.status;
    const std::string message(p.status.message());
    EXPECT_NE(message.find(std::string("--all-reduce-oneshot-max-kib ") + kib), std::string::npos) << message;
  }
}

TEST(ServingFlags, HelpListsTheAllReduceFlags) {
  CLI::App app{"serving flags test"};
  CoordinatorOptions o;
  ServingFlagText text;
  add_serving_flags(app, o, text);
  const std::string help = app.help();
  EXPECT_NE(help.find("--all-reduce "), std::string::npos) << help;
  EXPECT_NE(help.find("--all-reduce-oneshot-max-kib"), std::string::npos) << help;
  EXPECT_NE(help.find("how GPU workers all-reduce in tensor parallel"), std::string::npos) << help;
}

}  // namespace
}  // namespace exl3
