// Formatting of exl3-client's output; see format.h.
#include "client/format.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace exl3::client {
namespace {

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  return buf;
}

// Left-aligned columns separated by two spaces; the first row is the header.
std::string table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 2, ' ');
    }
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

std::string field(const std::string& name, const std::string& value) {
  constexpr size_t kNameWidth = 18;
  return absl::StrCat(name, std::string(name.size() < kNameWidth ? kNameWidth - name.size() : 1, ' '), value, "\n");
}

}  // namespace

std::string finish_reason_name(exl3::v1::FinishReason reason) {
  switch (reason) {
    case exl3::v1::FINISH_REASON_LENGTH:
      return "length";
    case exl3::v1::FINISH_REASON_EOS:
      return "eos";
    case exl3::v1::FINISH_REASON_STOP_STRING:
      return "stop_string";
    case exl3::v1::FINISH_REASON_STOP_TOKEN:
      return "stop_token";
    case exl3::v1::FINISH_REASON_CONTEXT:
      return "context";
    default:
      return "unspecified";
  }
}

std::string status_code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return absl::StrCat("CODE_", static_cast<int>(code));
  }
}

std::string format_summary(const GenerateSummary& s) {
  const std::string rate = s.total_s > 0 ? fixed(static_cast<double>(s.tokens) / s.total_s, 1) : "n/a";
  const std::string ttft = s.first_token_s >= 0 ? absl::StrCat(fixed(s.first_token_s * 1e3, 1), " ms") : "n/a";
  return absl::StrCat(s.tokens, " tokens in ", fixed(s.total_s, 2), " s, ", rate, " tokens/s, time to first token ",
                      ttft, ", finish reason ", finish_reason_name(s.finish_reason));
}

std::string format_bytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024 && bytes > -1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes);
  int unit = -1;
  while ((value >= 1024 || value <= -1024) && unit < 5) {
    value /= 1024;
    ++unit;
  }
  const double magnitude = value < 0 ? -value : value;
  return absl::StrCat(fixed(value, magnitude < 10 ? 2 : magnitude < 100 ? 1 : 0), " ", kUnits[unit]);
}

std::string format_token_ids(std::span<const int32_t> ids) { return absl::StrJoin(ids, ","); }

std::string format_model_info(const exl3::v1::ModelInfoResponse& info) {
  std::string out;
  out += field("architecture", info.architecture());
  out += field("model dir", info.model_dir());
  out += field("layers", absl::StrCat(info.num_layers()));
  out += field("hidden size", absl::StrCat(info.hidden_size()));
  out += field("vocab size", absl::StrCat(info.vocab_size()));
  out += field("bits per weight", fixed(info.bits_per_weight(), 2));
  out += field("max context", absl::StrCat(info.max_context()));
  out += field("split mode", info.split_mode());
  out += field("bos token id", info.has_bos_token_id() ? absl::StrCat(info.bos_token_id()) : "none");
  out += field("eos token ids", info.eos_token_ids().empty() ? "none" : absl::StrJoin(info.eos_token_ids(), ","));
  absl::StrAppend(&out, "shard plan (", info.shards_size(), info.shards_size() == 1 ? " rank" : " ranks", "):\n");
  std::vector<std::vector<std::string>> rows = {{"rank", "device", "layers", "attn heads", "kv heads", "mlp columns",
                                                 "vocab rows", "weights", "cache", "workspace", "cap"}};
  int64_t weights = 0, cache = 0, workspace = 0;
  for (const exl3::v1::RankShard& s : info.shards()) {
    rows.push_back({absl::StrCat(s.rank()), s.device(), absl::StrCat("[", s.first_layer(), ", ", s.end_layer(), ")"),
                    absl::StrCat(s.attention_heads()), absl::StrCat(s.kv_heads()), absl::StrCat(s.mlp_columns()),
                    absl::StrCat(s.vocab_rows()), format_bytes(s.weight_bytes()), format_bytes(s.cache_bytes()),
                    format_bytes(s.workspace_bytes()), format_bytes(s.cap_bytes())});
    weights += s.weight_bytes();
    cache += s.cache_bytes();
    workspace += s.workspace_bytes();
  }
  if (info.shards_size() > 1) {
    rows.push_back(
        {"total", "", "", "", "", "", "", format_bytes(weights), format_bytes(cache), format_bytes(workspace), ""});
  }
  out += table(rows);
  return out;
}

std::string format_stats(const exl3::v1::StatsResponse& stats) {
  std::string out;
  out += field("uptime", absl::StrCat(fixed(stats.uptime_s(), 1), " s"));
  out += field("requests", absl::StrCat("queued ", stats.queued_requests(), ", running ", stats.running_requests(),
                                        ", completed ", stats.completed_requests()));
  out += field("steps", absl::StrCat(stats.steps(), " (largest batch ", stats.largest_batch(), ")"));
  out += field("tokens", absl::StrCat("prompt ", stats.prompt_tokens(), ", generated ", stats.generated_tokens()));
  out += field("throughput", absl::StrCat(fixed(stats.recent_tokens_per_s(), 1), " tokens/s (last 10 s), ",
                                          fixed(stats.mean_tokens_per_s(), 1), " tokens/s (since start)"));
  out += field("kv pages", absl::StrCat("free ", stats.free_kv_pages(), " of ", stats.total_kv_pages(), " (cached ",
                                        stats.cached_kv_pages(), ", shared ", stats.shared_kv_pages(), ")"));
  out += field("prefix cache", absl::StrCat("hit rate ", fixed(100.0 * stats.prefix_cache_hit_rate(), 1),
                                            "%, prompt tokens computed ", stats.prompt_tokens_computed(), ", reused ",
                                            stats.prompt_tokens_reused()));
  if (stats.speculative_rounds() > 0) {
    const double rate = stats.draft_tokens_proposed() > 0
                            ? 100.0 * static_cast<double>(stats.draft_tokens_accepted()) / stats.draft_tokens_proposed()
                            : 0.0;
    out += field("speculative", absl::StrCat(stats.speculative_rounds(), " rounds, draft tokens accepted ",
                                             stats.draft_tokens_accepted(), " of ", stats.draft_tokens_proposed(), " (",
                                             fixed(rate, 1), "%)"));
  }
  std::vector<std::string> batches;
  for (int b = 0; b < stats.batch_size_counts_size(); ++b) {
    if (stats.batch_size_counts(b) != 0) batches.push_back(absl::StrCat(b, ": ", stats.batch_size_counts(b)));
  }
  out += field("steps by batch", batches.empty() ? "none" : absl::StrJoin(batches, ", "));
  absl::StrAppend(&out, "workers (", stats.workers_size(), "):\n");
  std::vector<std::vector<std::string>> rows = {{"rank", "device", "weights", "cache", "memory used"}};
  for (const exl3::v1::WorkerStats& w : stats.workers()) {
    rows.push_back({absl::StrCat(w.rank()), w.device(), format_bytes(w.weight_bytes()), format_bytes(w.cache_bytes()),
                    format_bytes(w.memory_used_bytes())});
  }
  out += table(rows);
  return out;
}

}  // namespace exl3::client
