// The worker's result-writing thread.
#include "worker/service/reply_writer.h"

#include <utility>

namespace exl3 {

ReplyWriter::ReplyWriter(Stream* stream) : stream_(stream) {
  thread_ = std::thread([this] { run(); });
}

ReplyWriter::~ReplyWriter() { close(); }

bool ReplyWriter::send(control::v1::WorkerMessage message) {
  std::lock_guard lock(mu_);
  if (failed_ || closing_) return false;
  queue_.push_back(std::move(message));
  cv_.notify_all();
  return true;
}

bool ReplyWriter::close() {
  {
    std::lock_guard lock(mu_);
    closing_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  std::lock_guard lock(mu_);
  return !failed_;
}

void ReplyWriter::run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
    if (queue_.empty()) return;  // closing, everything written
    control::v1::WorkerMessage message = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    const bool ok = stream_->Write(message);
    lock.lock();
    if (!ok) {
      failed_ = true;
      queue_.clear();
      return;
    }
  }
}

}  // namespace exl3
