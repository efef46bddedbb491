// Ends a worker that lost its coordinator while inside a command. A command runs on the session's
// main thread; a collective blocked on a peer that is gone (its host's link down, its process
// killed) holds that thread until the collective's own timeout, and the session's end goes
// unnoticed meanwhile. The watch polls the control channel's state; when the connection has not
// been READY for `grace` while a command runs, it says so on stderr and exits the process with
// code 1, so no worker outlives its group.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace exl3 {

class CoordinatorWatch {
 public:
  CoordinatorWatch(std::shared_ptr<grpc::Channel> channel, std::string who, std::chrono::milliseconds grace);
  ~CoordinatorWatch();
  CoordinatorWatch(const CoordinatorWatch&) = delete;
  CoordinatorWatch& operator=(const CoordinatorWatch&) = delete;

  // Brackets a command: the watch acts only between the two.
  void command_started() { busy_ = true; }
  void command_finished() { busy_ = false; }

 private:
  void run();

  std::shared_ptr<grpc::Channel> channel_;
  std::string who_;  // "exl3-worker rank R (coordinator HOST:PORT)"
  std::chrono::milliseconds grace_;
  std::atomic<bool> busy_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace exl3
