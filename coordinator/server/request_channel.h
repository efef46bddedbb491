// RequestChannel: hands a request's generated text and tokens from the serving loop (producer)
// to the gRPC handler that streams them (consumer). Waits have deadlines so the handler can
// notice client cancellation.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/scheduler/request.h"
#include "kernels/sampling.h"

namespace exl3 {

struct GenerationUsage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  double time_to_first_token_s = 0.0;
  double decode_tokens_per_s = 0.0;
  double total_time_s = 0.0;
};

struct GenerationChunk {
  std::string text;
  std::vector<int32_t> tokens;
  // Per token of `tokens` when the request asked for logprobs (sampling.logprobs > 0), else empty.
  std::vector<TokenLogprobs> logprobs;
  bool done = false;
  std::optional<FinishReason> finish;  // set when done without error
  GenerationUsage usage;
  absl::Status error;                  // set when done with an error
};

class RequestChannel {
 public:
  void push(const std::string& text, const std::vector<int32_t>& tokens,
            const std::vector<TokenLogprobs>& logprobs = {});
  void finish(FinishReason reason, const GenerationUsage& usage);
  void fail(const absl::Status& error);
  // Everything pushed since the last take, waiting up to `timeout` for something new. Returns
  // nullopt on timeout with nothing new.
  std::optional<GenerationChunk> take(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  GenerationChunk pending_;
  bool has_news_ = false;
};

}  // namespace exl3
