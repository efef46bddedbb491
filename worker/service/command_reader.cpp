// The worker's command-reading thread.
#include "worker/service/command_reader.h"

#include <utility>

namespace exl3 {

CommandReader::CommandReader(Stream* stream, grpc::ClientContext* context) : stream_(stream), context_(context) {
  thread_ = std::thread([this] { run(); });
}

CommandReader::~CommandReader() { stop(); }

std::optional<control::v1::Command> CommandReader::next() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return ended_ || !queue_.empty(); });
  if (queue_.empty()) return std::nullopt;
  control::v1::Command command = std::move(queue_.front());
  queue_.pop_front();
  return command;
}

void CommandReader::stop() {
  if (!thread_.joinable()) return;
  bool ended = false;
  {
    std::lock_guard lock(mu_);
    ended = ended_;
  }
  if (!ended) context_->TryCancel();
  thread_.join();
}

void CommandReader::run() {
  control::v1::Command command;
  while (stream_->Read(&command)) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(command));
    command = control::v1::Command();
    cv_.notify_all();
  }
  std::lock_guard lock(mu_);
  ended_ = true;
  cv_.notify_all();
}

}  // namespace exl3
