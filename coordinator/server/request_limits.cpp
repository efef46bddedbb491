// Request size checks and the in-flight call counter of the public API (see request_limits.h).
#include "coordinator/server/request_limits.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status check_flag(const char* flag, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return invalid(absl::StrCat(flag, " must be >= ", min, ", got ", value));
}

}  // namespace

absl::StatusOr<RequestLimits> resolve_request_limits(RequestLimits limits, int32_t max_context) {
  EXL3_RETURN_IF_ERROR(check_flag("--max-stop-strings", limits.max_stop_strings, 0));
  EXL3_RETURN_IF_ERROR(check_flag("--max-stop-string-bytes", limits.max_stop_string_bytes, 0));
  EXL3_RETURN_IF_ERROR(check_flag("--max-banned-strings", limits.max_banned_strings, 0));
  EXL3_RETURN_IF_ERROR(check_flag("--max-banned-string-bytes", limits.max_banned_string_bytes, 0));
  EXL3_RETURN_IF_ERROR(check_flag("--max-prompt-bytes", limits.max_prompt_bytes, 1));
  EXL3_RETURN_IF_ERROR(check_flag("--max-prompt-tokens", limits.max_prompt_tokens, 0));
  EXL3_RETURN_IF_ERROR(check_flag("--max-new-tokens", limits.max_new_tokens, 0));
  EXL3_RETURN_IF_ERROR(check_flag("--max-request-id-bytes", limits.max_request_id_bytes, 0));
  EXL3_RETURN_IF_ERROR(check_flag("--max-requests", limits.max_requests, 1));
  EXL3_RETURN_IF_ERROR(check_flag("--max-requests-per-connection", limits.max_requests_per_connection, 0));
  if (limits.max_prompt_tokens == 0) limits.max_prompt_tokens = max_context;
  if (limits.max_new_tokens == 0) limits.max_new_tokens = max_context;
  if (limits.max_prompt_tokens > max_context) {
    return invalid(absl::StrCat("--max-prompt-tokens ", limits.max_prompt_tokens, " exceeds the served context of ",
                                max_context, " tokens (--max-seq-len)"));
  }
  if (limits.max_new_tokens > max_context) {
    return invalid(absl::StrCat("--max-new-tokens ", limits.max_new_tokens, " exceeds the served context of ",
                                max_context, " tokens (--max-seq-len)"));
  }
  return limits;
}

int64_t max_request_message_bytes(const RequestLimits& limits) {
  // Each stop or banned string costs a tag and a length besides its bytes; each token id at most
  // 5 bytes.
  const int64_t bytes = limits.max_prompt_bytes + 5 * static_cast<int64_t>(limits.max_prompt_tokens) +
                        limits.max_stop_string_bytes + 6 * static_cast<int64_t>(limits.max_stop_strings) +
                        limits.max_banned_string_bytes + 6 * static_cast<int64_t>(limits.max_banned_strings) +
                        limits.max_request_id_bytes + (1 << 20);
  return std::clamp<int64_t>(bytes, 4 << 20, std::numeric_limits<int32_t>::max());
}

absl::Status check_request_size(const v1::GenerateRequest& request, const RequestLimits& limits) {
  if (static_cast<int64_t>(request.request_id().size()) > limits.max_request_id_bytes) {
    return invalid(absl::StrCat("request_id is ", request.request_id().size(), " bytes, more than the limit of ",
                                limits.max_request_id_bytes, " bytes (--max-request-id-bytes)"));
  }
  const v1::StoppingCriteria& stopping = request.stopping();
  if (stopping.stop_strings_size() > limits.max_stop_strings) {
    return invalid(absl::StrCat("stopping.stop_strings has ", stopping.stop_strings_size(),
                                " strings, more than the limit of ", limits.max_stop_strings,
                                " (--max-stop-strings)"));
  }
  int64_t stop_bytes = 0;
  for (const std::string& s : stopping.stop_strings()) stop_bytes += static_cast<int64_t>(s.size());
  if (stop_bytes > limits.max_stop_string_bytes) {
    return invalid(absl::StrCat("stopping.stop_strings hold ", stop_bytes, " bytes together, more than the limit of ",
                                limits.max_stop_string_bytes, " bytes (--max-stop-string-bytes)"));
  }
  const v1::SamplingParams& sampling = request.sampling();
  if (sampling.banned_strings_size() > limits.max_banned_strings) {
    return invalid(absl::StrCat("sampling.banned_strings has ", sampling.banned_strings_size(),
                                " strings, more than the limit of ", limits.max_banned_strings,
                                " (--max-banned-strings)"));
  }
  int64_t banned_bytes = 0;
  for (const std::string& s : sampling.banned_strings()) banned_bytes += static_cast<int64_t>(s.size());
  if (banned_bytes > limits.max_banned_string_bytes) {
    return invalid(absl::StrCat("sampling.banned_strings hold ", banned_bytes,
                                " bytes together, more than the limit of ", limits.max_banned_string_bytes,
                                " bytes (--max-banned-string-bytes)"));
  }
  if (stopping.has_max_new_tokens() && stopping.max_new_tokens() > limits.max_new_tokens) {
    return invalid(absl::StrCat("stopping.max_new_tokens = ", stopping.max_new_tokens(), " is more than the limit of ",
                                limits.max_new_tokens, " (--max-new-tokens)"));
  }
  if (request.input_case() == v1::GenerateRequest::kPrompt &&
      static_cast<int64_t>(request.prompt().size()) > limits.max_prompt_bytes) {
    return invalid(absl::StrCat("prompt is ", request.prompt().size(), " bytes, more than the limit of ",
                                limits.max_prompt_bytes, " bytes (--max-prompt-bytes)"));
  }
  if (request.input_case() == v1::GenerateRequest::kPromptTokens) {
    // BOS, when add_bos asks for it, is counted after tokenizing.
    EXL3_RETURN_IF_ERROR(check_prompt_tokens(request.prompt_tokens().ids_size(), "prompt_tokens", limits));
  }
  return absl::OkStatus();
}

absl::Status check_prompt_tokens(int64_t tokens, const char* field, const RequestLimits& limits) {
  if (tokens <= limits.max_prompt_tokens) return absl::OkStatus();
  return invalid(absl::StrCat(field, " is ", tokens, " tokens, more than the limit of ", limits.max_prompt_tokens,
                              " tokens (--max-prompt-tokens)"));
}

absl::Status check_tokenize_size(const v1::TokenizeRequest& request, const RequestLimits& limits) {
  if (static_cast<int64_t>(request.text().size()) <= limits.max_prompt_bytes) return absl::OkStatus();
  return invalid(absl::StrCat("text is ", request.text().size(), " bytes, more than the limit of ",
                              limits.max_prompt_bytes, " bytes (--max-prompt-bytes)"));
}

InFlightRequests::InFlightRequests(int32_t max_total, int32_t max_per_connection)
    : max_total_(max_total), max_per_connection_(max_per_connection) {}

InFlightRequests::Slot::Slot(Slot&& other) noexcept : owner_(other.owner_), peer_(std::move(other.peer_)) {
  other.owner_ = nullptr;
}

InFlightRequests::Slot::~Slot() {
  if (owner_ != nullptr) owner_->release(peer_);
}

absl::StatusOr<InFlightRequests::Slot> InFlightRequests::acquire(const std::string& peer) {
  std::lock_guard lock(mu_);
  if (total_ >= max_total_) {
    return absl::ResourceExhaustedError(absl::StrCat("the server has ", total_,
                                                     " generate requests in flight, its limit (--max-requests ",
                                                     max_total_, "); retry later"));
  }
  auto it = per_connection_.find(peer);
  const int32_t mine = it == per_connection_.end() ? 0 : it->second;
  if (max_per_connection_ > 0 && mine >= max_per_connection_) {
    return absl::ResourceExhaustedError(absl::StrCat("this connection (", peer, ") has ", mine,
                                                     " generate requests in flight, the limit per connection "
                                                     "(--max-requests-per-connection ",
                                                     max_per_connection_, "); retry later"));
  }
  ++total_;
  ++per_connection_[peer];
  return Slot(this, peer);
}

void InFlightRequests::release(const std::string& peer) {
  std::lock_guard lock(mu_);
  --total_;
  auto it = per_connection_.find(peer);
  if (it != per_connection_.end() && --it->second == 0) per_connection_.erase(it);
}

int32_t InFlightRequests::total() const {
  std::lock_guard lock(mu_);
  return total_;
}

int32_t InFlightRequests::for_connection(const std::string& peer) const {
  std::lock_guard lock(mu_);
  auto it = per_connection_.find(peer);
  return it == per_connection_.end() ? 0 : it->second;
}

}  // namespace exl3
