// Reports of exl3-bench measurements: the environment a run happened in (device or CPU, build
// commit, command line, date) and the JSON and markdown forms of a model benchmark.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/model_bench.h"
#include "nlohmann/json.hpp"

namespace exl3 {

// The build's git commit (short hash given at configure time), or "unknown".
std::string bench_git_commit();

// {"backend", "device" (CUDA: name, sms, memory_bytes, driver_version, runtime_version, compute
// capability; CPU: cpu_model, cores), "host_cpu", "hostname", "compiler", "build", "cuda",
// "commit", "argv", "command", "date" (UTC, ISO 8601)}. Every exl3-bench mode reports this.
nlohmann::json capture_environment(const std::string& backend, int device, const std::vector<std::string>& argv);

// {"environment", "model", "backend", "copy_bandwidth_gbs", "prefill": [...], "decode": [...]}.
nlohmann::json model_bench_json(const ModelBenchResult& result);

// A heading, a prefill table and a decode table (one row per measurement).
std::string model_bench_markdown(const ModelBenchResult& result);

// Writes `text` to `path` (truncating); errors name the path.
absl::Status write_report_file(const std::string& path, const std::string& text);

}  // namespace exl3
