// Text that exl3-client prints: the generation summary line, ModelInfo with the shard plan as a
// table, Stats, token id lists, byte sizes and gRPC status code names. Pure functions of their
// inputs so that tests can check them without a server.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "grpcpp/support/status.h"
#include "proto/inference.pb.h"

namespace exl3::client {

// What the client measured over one streamed generation.
struct GenerateSummary {
  int64_t tokens = 0;
  double total_s = 0;
  // Seconds from sending the request to the first response carrying tokens; < 0 if none came.
  double first_token_s = -1;
  exl3::v1::FinishReason finish_reason = exl3::v1::FINISH_REASON_UNSPECIFIED;
};

// "N tokens in S s, X tokens/s, time to first token T ms, finish reason R" (T is "n/a" without
// tokens; X counts all tokens over the whole time S).
std::string format_summary(const GenerateSummary& summary);

// "length", "eos", "stop_string", "stop_token", "context" or "unspecified".
std::string finish_reason_name(exl3::v1::FinishReason reason);

// "UNAVAILABLE", "INVALID_ARGUMENT", ... as in the gRPC documentation.
std::string status_code_name(grpc::StatusCode code);

// Binary units with 3 significant digits: "0 B", "512 B", "1.50 KiB", "12.3 GiB".
std::string format_bytes(int64_t bytes);

// "1,2,3".
std::string format_token_ids(std::span<const int32_t> ids);

// Model facts, one per line, then the shard plan as a table with one row per rank.
std::string format_model_info(const exl3::v1::ModelInfoResponse& info);

// Scheduler and throughput counters, the batch size histogram and a table of workers.
std::string format_stats(const exl3::v1::StatsResponse& stats);

}  // namespace exl3::client
