// ReplyWriter: the worker's command results go out on a thread of their own, so the session's
// reading thread starts the next command (already sent by a pipelining coordinator) while the
// previous result is still being written: writing a result is off the device's critical path.
// Results are written in the order queued; gRPC allows this one writer beside the one reader.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "proto/worker.grpc.pb.h"

namespace exl3 {

class ReplyWriter {
 public:
  using Stream = grpc::ClientReaderWriter<control::v1::WorkerMessage, control::v1::Command>;
  explicit ReplyWriter(Stream* stream);
  // Closes (see close()) if the caller did not.
  ~ReplyWriter();
  ReplyWriter(const ReplyWriter&) = delete;
  ReplyWriter& operator=(const ReplyWriter&) = delete;

  // Queues a message; false when an earlier write failed (the stream is broken: nothing more is
  // written).
  bool send(control::v1::WorkerMessage message);
  // Writes what is queued, stops the thread and returns whether every write succeeded. The stream
  // is the caller's alone afterwards (WritesDone, Finish).
  bool close();

 private:
  void run();

  Stream* stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<control::v1::WorkerMessage> queue_;
  bool closing_ = false;
  bool failed_ = false;
  std::thread thread_;
};

}  // namespace exl3
