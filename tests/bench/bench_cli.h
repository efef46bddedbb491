// Runs the exl3-bench command line in-process for the bench tests: the exit code, with what went
// to stderr (stdout, the markdown tables, is swallowed).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench/exl3_bench_cli.h"
#include "gtest/gtest.h"

namespace exl3::testing {

inline int run_bench(std::vector<std::string> args, std::string* err = nullptr) {
  args.insert(args.begin(), "exl3-bench");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  const int rc = run_exl3_bench(static_cast<int>(argv.size()), argv.data());
  ::testing::internal::GetCapturedStdout();
  const std::string captured = ::testing::internal::GetCapturedStderr();
  if (err != nullptr) *err = captured;
  return rc;
}

inline std::pair<int, std::string> run_cli(std::vector<std::string> args) {
  std::string err;
  const int rc = run_bench(std::move(args), &err);
  return {rc, err};
}

}  // namespace exl3::testing
