// --int8-activations on every binary that takes it (exl3-launch, exl3-coordinator, exl3-worker,
// exl3-eval): a value other than off / auto / on stops the binary naming the flag and the choices
// before anything starts, and the help text says what the mode does and what auto covers.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "integration/run_command.h"

namespace exl3::testing {
namespace {

std::string fixture() { return std::string(EXL3_SOURCE_DIR) + "/models/exl3-4.0bpw"; }
std::string bin(const char* name) { return std::string(EXL3_BIN_DIR) + "/" + name; }

void expect_refused(std::vector<std::string> argv, int code) {
  const CommandResult r = run_command(argv, std::chrono::seconds(30), "int8_activations_bad_flag");
  EXPECT_TRUE(r.exited_with(code)) << argv[0] << ": " << r.describe();
  EXPECT_NE(r.output.find("--int8-activations \"yes\""), std::string::npos) << r.describe();
  EXPECT_NE(r.output.find("off, auto or on"), std::string::npos) << r.describe();
}

TEST(Int8ActivationsFlags, BadValuesAreRefusedNamingTheFlag) {
  expect_refused({bin("exl3-launch"), "--model", fixture(), "--cpu-workers", "1", "--int8-activations", "yes"}, 2);
  expect_refused({bin("exl3-coordinator"), "--model", fixture(), "--world", "1", "--int8-activations", "yes"}, 2);
  expect_refused({bin("exl3-worker"), "--coordinator", "127.0.0.1:1", "--rank", "0", "--world", "1",
                  "--int8-activations", "yes"},
                 2);
  expect_refused({bin("exl3-eval"), "--model", fixture(), "--ids",
                  std::string(EXL3_SOURCE_DIR) + "/tests/data/reference/token_ids.json", "--window", "16",
                  "--int8-activations", "yes"},
                 1);
}

TEST(Int8ActivationsFlags, HelpSaysWhatAutoCovers) {
  for (const char* name : {"exl3-launch", "exl3-coordinator", "exl3-worker", "exl3-eval"}) {
    const CommandResult r = run_command({bin(name), "--help"}, std::chrono::seconds(30), "int8_activations_help");
    EXPECT_TRUE(r.exited_with(0)) << name << ": " << r.describe();
    EXPECT_NE(r.output.find("--int8-activations"), std::string::npos) << name;
    EXPECT_NE(r.output.find("auto: MUL1 weights of at most 6 bits, at most 8 rows per matmul"), std::string::npos)
        << name << ": " << r.output;
  }
}

}  // namespace
}  // namespace exl3::testing
