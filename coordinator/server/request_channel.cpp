// RequestChannel: producer/consumer hand-off of generated chunks.
#include "coordinator/server/request_channel.h"

namespace exl3 {

void RequestChannel::push(const std::string& text, const std::vector<int32_t>& tokens,
                          const std::vector<TokenLogprobs>& logprobs) {
  std::lock_guard lock(mu_);
  if (pending_.done) return;
  pending_.text += text;
  pending_.tokens.insert(pending_.tokens.end(), tokens.begin(), tokens.end());
  pending_.logprobs.insert(pending_.logprobs.end(), logprobs.begin(), logprobs.end());
  has_news_ = true;
  cv_.notify_all();
}

void RequestChannel::finish(FinishReason reason, const GenerationUsage& usage) {
  std::lock_guard lock(mu_);
  if (pending_.done) return;
  pending_.done = true;
  pending_.finish = reason;
  pending_.usage = usage;
  has_news_ = true;
  cv_.notify_all();
}

void RequestChannel::fail(const absl::Status& error) {
  std::lock_guard lock(mu_);
  if (pending_.done) return;
  pending_.done = true;
  pending_.error = error;
  has_news_ = true;
  cv_.notify_all();
}

std::optional<GenerationChunk> RequestChannel::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return has_news_; })) return std::nullopt;
  GenerationChunk out = pending_;
  pending_.text.clear();
  pending_.tokens.clear();
  pending_.logprobs.clear();
  has_news_ = false;
  return out;
}

}  // namespace exl3
