// exl3-eval as users run it: --dump-logits on the fixture sequences (checked against ExLlamaV3's
// logits), --encode-jsonl with a real tokenizer, and clear errors for bad invocations.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/loader/safetensors.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {
namespace {

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

RunResult run(const std::string& args) {
  const std::string cmd = std::string("timeout 300 ") + EXL3_EVAL_BIN + " " + args + " 2>&1";
  RunResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) r.output.append(buf, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(Exl3EvalCli, DumpLogitsMatchesExLlamaV3) {
  const std::string out = testing::work_path("eval_logits.safetensors");
  const RunResult r = run("--model " + testing::source_path("models/exl3-4.0bpw") + " --ids " +
                          testing::test_data("reference/token_ids.json") + " --dump-logits " + out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto ours = SafetensorsFile::open(out);
  ASSERT_TRUE(ours.ok()) << ours.status();
  auto ref = SafetensorsFile::open(testing::test_data("reference/exl3_4.0bpw.safetensors"));
  ASSERT_TRUE(ref.ok()) << ref.status();
  const Tensor a = *(*ref)->get("logits"), b = *(*ours)->get("logits");
  ASSERT_EQ(b.shape(), (Shape{4, 32, 4096}));
  const LogitsComparison c = compare_logits(a, b);
  std::printf("exl3-eval --dump-logits vs ExLlamaV3: mean KL %.3g, top-1 %.4f\n", c.mean_kl, c.top1_agreement);
  EXPECT_LE(c.mean_kl, 3e-5);  // 10x today's 2.6e-6
  EXPECT_GE(c.top1_agreement, 0.98);
  const Tensor ids = *(*ours)->get("input_ids");
  EXPECT_EQ(ids.dtype(), DType::kI64);
  EXPECT_EQ(ids.data<int64_t>()[0], 0);  // BOS
}

TEST(Exl3EvalCli, EncodeJsonlWithTheModelTokenizer) {
  const std::string in = testing::work_path("eval_encode.jsonl");
  std::ofstream(in) << "{\"text\": \"<s>Hello world\"}\n{\"text\": \"\"}\n";
  const RunResult r = run("--tokenizer " + testing::source_path("models/exl3-4.0bpw/tokenizer.json") +
                          " --encode-jsonl " + in);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(r.output);
  std::string first, second;
  std::getline(lines, first);
  std::getline(lines, second);
  const auto ids = nlohmann::json::parse(first)["ids"].get<std::vector<int32_t>>();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 0);  // "<s>" parsed as the special token
  EXPECT_EQ(nlohmann::json::parse(second)["ids"].size(), 0u);
}

TEST(Exl3EvalCli, BadInvocationsExplainThemselves) {
  RunResult r = run("--model /nonexistent/model --ids " + testing::test_data("reference/token_ids.json") +
                    " --window 16");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/nonexistent/model"), std::string::npos) << r.output;

  r = run("--model " + testing::source_path("models/exl3-4.0bpw") + " --ids " +
          testing::test_data("reference/token_ids.json"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--window"), std::string::npos) << r.output;

  const std::string bad_ids = testing::work_path("bad_ids.json");
  std::ofstream(bad_ids) << "[[0, 5, \"x\"]]";
  r = run("--model " + testing::source_path("models/exl3-4.0bpw") + " --ids " + bad_ids + " --window 2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("bad_ids.json"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace exl3
