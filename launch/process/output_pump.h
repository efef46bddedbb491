// OutputPump: one thread that copies the children's stdout/stderr pipes to the launcher's own
// descriptors, putting a prefix such as "[worker 1] " before every line. Each output line is
// written with a single write() call, so lines of different workers never mix within a line.
// A line longer than 64 KiB is cut into several prefixed lines; a last line without '\n' gets
// one at end of file.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/process/fd_util.h"
#include "launch/process/unique_fd.h"

namespace exl3 {

class OutputPump {
 public:
  struct Source {
    UniqueFd fd;           // read end of a child's pipe (owned)
    int destination = -1;  // the launcher's descriptor the lines go to (not owned; must outlive the pump)
    std::string prefix;
  };

  // Starts the thread. The pump owns the sources and closes each at its end of file.
  static absl::StatusOr<std::unique_ptr<OutputPump>> start(std::vector<Source> sources);

  // Waits until every source has reached end of file (all writers exited) or the deadline
  // passes, then stops the thread after writing out what is buffered. Returns false if some
  // source was still open at the deadline. Idempotent.
  bool finish(ProcessClock::time_point deadline);

  // finish() with a deadline of now.
  ~OutputPump();

  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

 private:
  struct Stream {
    Source source;
    std::string pending;  // bytes after the last '\n'
  };

  OutputPump() = default;
  void run();
  // Reads up to `max_reads` chunks that are available from `stream`; returns false at end of
  // file or on a read error.
  bool pump_once(Stream& stream, int max_reads);
  void emit_lines(Stream& stream, bool at_end);

  std::vector<Stream> streams_;
  Pipe stop_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;       // guarded by mutex_
  bool all_ended_ = false;  // guarded by mutex_
};

}  // namespace exl3
