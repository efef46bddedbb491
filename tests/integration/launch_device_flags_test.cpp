// exl3-launch's and exl3-worker's device flags as a user meets them, with the real binaries:
// --gpus and --cpu-workers together, --cpu-workers 0, --gpus (or neither flag) with no GPU
// visible or in a build without CUDA, bad --gpus lists, and a CUDA plan printed by --plan-only
// --gpus --split without touching a GPU (with the KV cache fitted to the caps, or sized by
// --cache-tokens). Every refusal must exit non-zero with a message that says what to do, quickly
// (each run is bounded by `timeout`, so a hang fails the test instead of stalling it). The GPUs
// are hidden (CUDA_VISIBLE_DEVICES empty), so the tests behave the same on a GPU machine.
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>

#include "common/test_paths.h"
#include "gtest/gtest.h"

namespace exl3 {
namespace {

struct CommandRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr
  double seconds = 0;
};

// Runs `args` after the binary with GPUs hidden, within 60 s.
CommandRun run(const std::string& binary, const std::string& args) {
  const std::string command = "env CUDA_VISIBLE_DEVICES= timeout 60 " + std::string(EXL3_BIN_DIR) + "/" + binary +
                              " " + args + " 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  CommandRun r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("$ %s\n%s(exit %d after %.2f s)\n", command.c_str(), r.output.c_str(), r.exit_code, r.seconds);
  return r;
}

std::string model() { return testing::source_path("models/exl3-4.0bpw"); }

bool has(const CommandRun& r, const std::string& needle) { return r.output.find(needle) != std::string::npos; }

void expect_refused(const CommandRun& r) {
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "timed out:\n" << r.output;
  EXPECT_LT(r.seconds, 30.0) << r.output;
}

TEST(LaunchDeviceFlags, GpusAndCpuWorkersTogetherAreRefused) {
  const CommandRun r = run("exl3-launch", "--model " + model() + " --gpus 0,1 --cpu-workers 2");
  expect_refused(r);
  EXPECT_TRUE(has(r, "--gpus and --cpu-workers exclude each other")) << r.output;
}

TEST(LaunchDeviceFlags, ZeroCpuWorkersAreRefusedWithTheRange) {
  const CommandRun r = run("exl3-launch", "--model " + model() + " --cpu-workers 0");
  expect_refused(r);
  EXPECT_TRUE(has(r, "--cpu-workers: Value 0 not in range 1 to 1024")) << r.output;
}

// No silent fallback to the CPU: --gpus without a usable GPU (none visible here, or a build
// without CUDA) is refused and points at --cpu-workers.
TEST(LaunchDeviceFlags, GpusWithoutAGpuAreRefused) {
  const CommandRun r = run("exl3-launch", "--model " + model() + " --gpus 0,1 --split 1,1");
  expect_refused(r);
  EXPECT_TRUE(has(r, "no GPU visible") || has(r, "no CUDA backend")) << r.output;
  EXPECT_TRUE(has(r, "--cpu-workers N")) << r.output;
  EXPECT_FALSE(has(r, "serving on")) << r.output;
}

TEST(LaunchDeviceFlags, NoDeviceFlagWithoutAGpuIsRefused) {
  const CommandRun r = run("exl3-launch", "--model " + model());
  expect_refused(r);
  EXPECT_TRUE(has(r, "--cpu-workers N")) << r.output;
}

TEST(LaunchDeviceFlags, BadGpuListsAreNamed) {
  CommandRun r = run("exl3-launch", "--model " + model() + " --gpus 0,0 --plan-only --split 1,1");
  expect_refused(r);
  EXPECT_TRUE(has(r, "GPU 0 is listed twice")) << r.output;
  r = run("exl3-launch", "--model " + model() + " --gpus 0,one --plan-only --split 1,1");
  expect_refused(r);
  EXPECT_TRUE(has(r, "\"one\" is not a GPU index")) << r.output;
  r = run("exl3-launch", "--model " + model() + " --gpus 0,1 --plan-only");
  expect_refused(r);
  EXPECT_TRUE(has(r, "--plan-only --gpus needs --split")) << r.output;
  r = run("exl3-launch", "--model " + model() + " --gpus 0,1 --plan-only --split 20");
  expect_refused(r);
  EXPECT_TRUE(has(r, "--split has 1 values for 2 workers")) << r.output;
}

// --plan-only with explicit GPUs and caps plans for CUDA workers without any GPU.
TEST(LaunchDeviceFlags, PlanOnlyPrintsACudaPlanWithoutAGpu) {
  const CommandRun r = run("exl3-launch", "--model " + model() + " --plan-only --gpus 0,1 --split 20,24 --max-seq-len 1024");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* needle : {"tensor-parallel plan over 2 ranks, cuda backend", "KV cache F16", "20.00 GiB", "24.00 GiB",
                             "CUDA context 600.00 MiB", "NCCL 900.00 MiB", "2 GPU worker(s) on GPU(s) 0,1 (NCCL)",
                             "in pinned host memory on every rank",
                             "KV cache: 64 pages of 256 tokens per rank (16384 tokens: max-batch 16 x 1024)"}) {
    EXPECT_TRUE(has(r, needle)) << needle << "\n" << r.output;
  }
}

// Caps that cannot even hold the CUDA context: refused before anything starts, naming the rank.
TEST(LaunchDeviceFlags, PlanOnlyCapsTooSmallForCudaAreRefusedByRank) {
  const CommandRun r = run("exl3-launch", "--model " + model() + " --plan-only --gpus 0,1 --split 0.5,24 --max-seq-len 1024");
  expect_refused(r);
  EXPECT_TRUE(has(r, "the model does not fit: rank 0 needs")) << r.output;
}

// Caps that hold one full-length sequence but not max-batch of them: the plan keeps the pages that
// fit and says so (the fixture caches 4 KiB a token: 512 x 2048 tokens are 4 GiB).
TEST(LaunchDeviceFlags, PlanOnlyFitsTheCacheToTheCaps) {
  const CommandRun r =
      run("exl3-launch", "--model " + model() + " --plan-only --gpus 0,1 --split 2,2 --max-seq-len 2048 --max-batch 512");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "fit, fewer than max-batch 512 x 2048; requests wait for pages")) << r.output;
}

// --cache-tokens: planned in whole pages; too big for the caps or below one --max-seq-len sequence
// is refused before anything starts, saying why (the rank and shortfall when too big).
TEST(LaunchDeviceFlags, PlanOnlyCacheTokens) {
  const std::string base = "--model " + model() + " --plan-only --gpus 0,1 --split 20,24 --max-seq-len 1024";
  CommandRun r = run("exl3-launch", base + " --cache-tokens 3000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r, "KV cache: 12 pages of 256 tokens per rank (3072 tokens, as --cache-tokens 3000 asks)")) << r.output;
  r = run("exl3-launch", base + " --cache-tokens 100000000");
  expect_refused(r);
  EXPECT_TRUE(has(r, "the model does not fit: ")) << r.output;
  EXPECT_TRUE(has(r, " needs ") && has(r, "rank ")) << r.output;
  EXPECT_TRUE(has(r, "--cache-tokens 100000000")) << r.output;
  r = run("exl3-launch", base + " --cache-tokens 700");  // 3 pages: less than one 1024-token sequence
  expect_refused(r);
  EXPECT_TRUE(has(r, "less than one sequence of --max-seq-len 1024")) << r.output;
}

// A GPU worker with no GPU (or from a build without CUDA) fails at once, naming its rank, before
// dialling the coordinator.
TEST(LaunchDeviceFlags, CudaWorkerWithoutAGpuFailsByRank) {
  const CommandRun r = run("exl3-worker", "--coordinator 127.0.0.1:9 --rank 1 --world 2 --backend cuda --connect-timeout 20");
  expect_refused(r);
  EXPECT_TRUE(has(r, "rank 1")) << r.output;
  EXPECT_TRUE(has(r, "no usable CUDA device") || has(r, "no CUDA backend")) << r.output;
  // A CUDA build prints its effective environment first; a build without CUDA refuses at once.
  if (has(r, "no usable CUDA device")) {
    EXPECT_TRUE(has(r, "NCCL_NVLS_ENABLE=0")) << r.output;
    EXPECT_TRUE(has(r, "no usable CUDA device: cudaError")) << r.output;  // the error's name, then its text
  }
}

}  // namespace
}  // namespace exl3
