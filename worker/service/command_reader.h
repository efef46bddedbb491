// CommandReader: the worker's session stream is read on a thread of its own, always waiting in
// Read. A synchronous gRPC client only polls its connection while some thread is inside a call on
// it; while the worker's main thread runs a long command (loading a model takes seconds to minutes)
// nobody would poll, the coordinator's keepalive pings would go unanswered and the coordinator
// would close a healthy session as dead. Commands are queued in the order read.
#pragma once

#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "proto/worker.grpc.pb.h"

namespace exl3 {

class CommandReader {
 public:
  using Stream = grpc::ClientReaderWriter<control::v1::WorkerMessage, control::v1::Command>;
  // `context` is the stream's call: stop() cancels it to end a Read that is still waiting.
  CommandReader(Stream* stream, grpc::ClientContext* context);
  // Stops (see stop()) if the caller did not.
  ~CommandReader();
  CommandReader(const CommandReader&) = delete;
  CommandReader& operator=(const CommandReader&) = delete;

  // The next command, waiting as long as the stream is open; nullopt once it has ended (the
  // coordinator closed it or the connection broke) and every command read before is taken.
  std::optional<control::v1::Command> next();
  // Ends the reading thread: cancels the call if the stream is still open, then joins. Afterwards
  // the stream is the caller's alone (Finish).
  void stop();

 private:
  void run();

  Stream* stream_;
  grpc::ClientContext* context_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<control::v1::Command> queue_;
  bool ended_ = false;
  std::thread thread_;
};

}  // namespace exl3
