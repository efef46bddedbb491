// Limits of the public API that keep one client from hurting the others: how much one Generate
// request may ask for (stop strings, prompt size, max_new_tokens, request id) and how many Generate
// calls may be in flight at once, in total and per connection. Sizes are checked before anything
// is tokenized or queued; every refusal names the request field (or the connection) and the flag
// that sets the limit, with its value.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/inference.pb.h"

namespace exl3 {

// Each has a flag of the same name on exl3-launch and exl3-coordinator (max_stop_strings is
// --max-stop-strings, ...).
struct RequestLimits {
  int32_t max_stop_strings = 64;                // stopping.stop_strings entries
  int64_t max_stop_string_bytes = 16 << 10;     // all of stopping.stop_strings together
  int32_t max_banned_strings = 64;              // sampling.banned_strings entries
  int64_t max_banned_string_bytes = 16 << 10;   // all of sampling.banned_strings together
  int64_t max_prompt_bytes = 4 << 20;           // text prompt (and Tokenize text)
  int32_t max_prompt_tokens = 0;                // prompt tokens, BOS included; 0 = the served context
  int32_t max_new_tokens = 0;                   // stopping.max_new_tokens; 0 = the served context
  int32_t max_request_id_bytes = 256;           // request_id
  int32_t max_requests = 1024;                  // Generate calls in flight (queued or running), all clients
  int32_t max_requests_per_connection = 256;    // the same per client connection; 0 = no such limit
};

// The limits with the 0 ("the served context") entries replaced by max_context. INVALID_ARGUMENT,
// naming the flag, for negative values, a zero where one is not allowed, or a token limit above
// max_context (--max-seq-len).
absl::StatusOr<RequestLimits> resolve_request_limits(RequestLimits limits, int32_t max_context);

// The largest request message these limits let through (prompt, stop strings, id and the rest),
// for the server's maximum receive size (at least gRPC's default of 4 MiB, at most INT32_MAX).
int64_t max_request_message_bytes(const RequestLimits& limits);

// Sizes of a Generate request that can be checked before tokenizing: request_id, stop string
// and banned string counts and bytes, prompt bytes, prompt_tokens count, max_new_tokens. INVALID_ARGUMENT naming the
// field, the value and the limit.
absl::Status check_request_size(const v1::GenerateRequest& request, const RequestLimits& limits);

// The prompt's length in tokens after tokenizing (BOS included); `field` is "prompt" or
// "prompt_tokens".
absl::Status check_prompt_tokens(int64_t tokens, const char* field, const RequestLimits& limits);

// Tokenize's text against max_prompt_bytes.
absl::Status check_tokenize_size(const v1::TokenizeRequest& request, const RequestLimits& limits);

// Counts Generate calls in flight, in total and per connection (gRPC's peer string, e.g.
// "ipv4:127.0.0.1:53412", is one client connection). acquire() takes a slot or refuses with
// RESOURCE_EXHAUSTED naming the limit; the slot is given back when the Slot is destroyed.
class InFlightRequests {
 public:
  InFlightRequests(int32_t max_total, int32_t max_per_connection);

  class Slot {
   public:
    Slot(Slot&& other) noexcept;
    Slot& operator=(Slot&&) = delete;
    Slot(const Slot&) = delete;
    ~Slot();

   private:
    friend class InFlightRequests;
    Slot(InFlightRequests* owner, std::string peer) : owner_(owner), peer_(std::move(peer)) {}
    InFlightRequests* owner_;
    std::string peer_;
  };

  absl::StatusOr<Slot> acquire(const std::string& peer);
  int32_t total() const;
  int32_t for_connection(const std::string& peer) const;

 private:
  void release(const std::string& peer);

  const int32_t max_total_;
  const int32_t max_per_connection_;
  mutable std::mutex mu_;
  int32_t total_ = 0;
  std::map<std::string, int32_t> per_connection_;  // only connections with calls in flight
};

}  // namespace exl3
