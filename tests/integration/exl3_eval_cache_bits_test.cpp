// exl3-eval --cache-bits / --kl-vs-fp16 as users run them on the 4.0 bpw fixture (first 4 held-out
// windows of 256 tokens): the full-precision perplexity printed beside the quantized one equals a
// plain run's; 8,8 moves perplexity less than 4,4 and both by little; KL is 0 for 16,16 and grows
// as the widths shrink; bad widths (and --cache-bits with --dump-logits) fail naming the flag.
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "gtest/gtest.h"
#include "integration/launched_server.h"
#include "integration/run_command.h"

namespace exl3::testing {
namespace {

// "key: value" lines of exl3-eval's stdout.
std::map<std::string, double> values(const std::string& output) {
  std::map<std::string, double> out;
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(": ");
    if (colon == std::string::npos) continue;
    try {
      out[line.substr(0, colon)] = std::stod(line.substr(colon + 2));
    } catch (const std::exception&) {
    }
  }
  return out;
}

CommandResult eval(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {std::string(EXL3_BIN_DIR) + "/exl3-eval",
                                   "--model",
                                   fixture_model_dir(),
                                   "--ids",
                                   std::string(EXL3_SOURCE_DIR) + "/tests/data/reference/heldout_ids.safetensors",
                                   "--window",
                                   "256",
                                   "--max-windows",
                                   "4"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return run_command(argv, std::chrono::seconds(300), "exl3_eval_cache_bits");
}

TEST(Exl3EvalCacheBits, QuantizedPerplexityAndKl) {
  const CommandResult plain = eval({});
  ASSERT_TRUE(plain.exited_with(0)) << plain.describe();
  const double fp = values(plain.output).at("perplexity");
  EXPECT_EQ(values(plain.output).at("windows"), 4);

  const CommandResult same = eval({"--cache-bits", "16", "--kl-vs-fp16"});
  ASSERT_TRUE(same.exited_with(0)) << same.describe();
  EXPECT_EQ(values(same.output).at("mean KL vs full cache"), 0.0);
  EXPECT_EQ(values(same.output).at("perplexity"), fp);

  double previous_kl = 0.0;
  for (const char* bits : {"8,8", "4,4", "2,2"}) {
    const CommandResult r = eval({"--cache-bits", bits, "--kl-vs-fp16"});
    ASSERT_TRUE(r.exited_with(0)) << r.describe();
    const std::map<std::string, double> v = values(r.output);
    const double ppl = v.at("perplexity"), kl = v.at("mean KL vs full cache");
    std::printf("%s: perplexity %.4f (full %.4f, %+.3f%%), mean KL %.3g\n", bits, ppl, fp, 100 * (ppl / fp - 1), kl);
    EXPECT_EQ(v.at("full-precision cache perplexity"), fp) << bits;
    EXPECT_GT(kl, previous_kl) << bits;
    previous_kl = kl;
    if (std::string(bits) == "8,8") {
      EXPECT_NEAR(ppl, fp, 0.001 * fp);  // P6 acceptance; +0.006% today
    } else if (std::string(bits) == "4,4") {
      EXPECT_NEAR(ppl, fp, 0.02 * fp);  // P6 acceptance; +0.36% today
    }
  }
}

TEST(Exl3EvalCacheBits, BadWidthsFailNamingTheFlag) {
  for (const char* bad : {"9", "4,1", "fp8"}) {
    const CommandResult r = eval({"--cache-bits", bad});
    EXPECT_TRUE(r.exited_with(1)) << r.describe();
    EXPECT_NE(r.output.find("--cache-bits"), std::string::npos) << r.describe();
  }
  const CommandResult dump =
      run_command({std::string(EXL3_BIN_DIR) + "/exl3-eval", "--model", fixture_model_dir(), "--ids",
                   std::string(EXL3_SOURCE_DIR) + "/tests/data/reference/token_ids.json", "--dump-logits",
                   std::string(EXL3_TEST_WORK_DIR) + "/unused.safetensors", "--cache-bits", "4,4"},
                  std::chrono::seconds(60), "exl3_eval_cache_bits_dump");
  EXPECT_TRUE(dump.exited_with(1)) << dump.describe();
  EXPECT_NE(dump.output.find("--cache-bits"), std::string::npos) << dump.describe();
}

}  // namespace
}  // namespace exl3::testing
