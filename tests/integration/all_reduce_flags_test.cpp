// --all-reduce and --all-reduce-oneshot-max-kib with the real binaries: a bad value stops
// exl3-launch and exl3-coordinator (exit 2) naming the flag and the value before anything starts,
// --help explains both, and a job of two CPU workers with --all-reduce oneshot is refused by the
// workers (CPU workers all-reduce through Gloo) instead of running without it.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "integration/run_command.h"

namespace exl3::testing {
namespace {

std::string fixture() { return std::string(EXL3_SOURCE_DIR) + "/models/exl3-4.0bpw"; }
std::string bin(const char* name) { return std::string(EXL3_BIN_DIR) + "/" + name; }

void expect_refused(std::vector<std::string> argv, const std::string& needle) {
  const CommandResult r = run_command(argv, std::chrono::seconds(30), "all_reduce_bad_flag");
  EXPECT_TRUE(r.exited_with(2)) << argv[0] << ": " << r.describe();
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.describe();
}

TEST(AllReduceFlags, BadValuesAreRefusedNamingTheFlag) {
  for (const char* name : {"exl3-launch", "exl3-coordinator"}) {
    std::vector<std::string> argv = {bin(name), "--model", fixture()};
    if (std::string(name) == "exl3-launch") {
      argv.insert(argv.end(), {"--cpu-workers", "1"});
    } else {
      argv.insert(argv.end(), {"--world", "1"});
    }
    std::vector<std::string> bad_mode = argv;
    bad_mode.insert(bad_mode.end(), {"--all-reduce", "nvlink"});
    expect_refused(bad_mode, "--all-reduce \"nvlink\": expected nccl or oneshot");
    std::vector<std::string> bad_kib = argv;
    bad_kib.insert(bad_kib.end(), {"--all-reduce", "oneshot", "--all-reduce-oneshot-max-kib", "0"});
    expect_refused(bad_kib, "--all-reduce-oneshot-max-kib 0: expected 1..65536");
  }
}

TEST(AllReduceFlags, HelpExplainsBoth) {
  for (const char* name : {"exl3-launch", "exl3-coordinator"}) {
    const CommandResult r = run_command({bin(name), "--help"}, std::chrono::seconds(30), "all_reduce_help");
    EXPECT_TRUE(r.exited_with(0)) << name << ": " << r.describe();
    EXPECT_NE(r.output.find("how GPU workers all-reduce in tensor parallel: nccl (default) or oneshot"),
              std::string::npos)
        << name << ": " << r.output;
    EXPECT_NE(r.output.find("--all-reduce-oneshot-max-kib"), std::string::npos) << name << ": " << r.output;
  }
}

// The coordinator sends the mode to every worker; a CPU worker of a group refuses oneshot when it
// loads its shard, and exl3-launch stops with that worker's reason.
TEST(AllReduceFlags, CpuWorkersRefuseOneshot) {
  const CommandResult r = run_command({bin("exl3-launch"), "--model", fixture(), "--cpu-workers", "2", "--port", "0",
                                       "--max-seq-len", "256", "--max-batch", "2", "--all-reduce", "oneshot"},
                                      std::chrono::seconds(120), "all_reduce_cpu_oneshot");
  EXPECT_TRUE(r.failed()) << r.describe();
  EXPECT_NE(r.output.find("all-reduce oneshot (parts up to 256 KiB)"), std::string::npos) << r.describe();
  EXPECT_NE(r.output.find("--all-reduce oneshot needs GPU workers (CPU workers all-reduce through Gloo)"),
            std::string::npos)
      << r.describe();
  EXPECT_EQ(r.output.find("serving on"), std::string::npos) << r.describe();
}

}  // namespace
}  // namespace exl3::testing
