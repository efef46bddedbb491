// The worker's watch on its control connection during commands (coordinator_watch.h).
#include "worker/service/coordinator_watch.h"

#include <cstdio>
#include <cstdlib>

namespace exl3 {

CoordinatorWatch::CoordinatorWatch(std::shared_ptr<grpc::Channel> channel, std::string who,
                                   std::chrono::milliseconds grace)
    : channel_(std::move(channel)), who_(std::move(who)), grace_(grace), thread_([this] { run(); }) {}

CoordinatorWatch::~CoordinatorWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CoordinatorWatch::run() {
  using Clock = std::chrono::steady_clock;
  const auto poll = std::chrono::milliseconds(100);
  Clock::time_point lost_since{};
  bool lost = false;
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, poll, [this] { return stop_; })) {
    // Without trying to connect: a closed or failed connection shows as IDLE or TRANSIENT_FAILURE.
    const grpc_connectivity_state state = channel_->GetState(false);
    if (!busy_ || state == GRPC_CHANNEL_READY) {
      lost = false;
      continue;
    }
    if (!lost) {
      lost = true;
      lost_since = Clock::now();
    }
    if (Clock::now() - lost_since >= grace_) {
      std::fprintf(stderr, "%s: the connection to the coordinator is gone while a command runs; exiting\n",
                   who_.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
}

}  // namespace exl3
