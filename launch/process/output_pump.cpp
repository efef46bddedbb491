// The thread that prefixes and forwards child output lines; see output_pump.h.
#include "launch/process/output_pump.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace exl3 {
namespace {

// Read size per wake-up and the longest line kept whole; a pipe holds 64 KiB by default.
constexpr size_t kChunk = 64 * 1024;
constexpr int kDrainReads = 16;

}  // namespace

absl::StatusOr<std::unique_ptr<OutputPump>> OutputPump::start(std::vector<Source> sources) {
  std::unique_ptr<OutputPump> pump(new OutputPump());
  absl::StatusOr<Pipe> stop = make_pipe();
  if (!stop.ok()) return stop.status();
  pump->stop_ = std::move(*stop);
  for (Source& s : sources) {
    // Non-blocking so that the final drain after a stop request never waits on a writer.
    const int flags = ::fcntl(s.fd.get(), F_GETFL);
    if (flags < 0 || ::fcntl(s.fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) return errno_error("fcntl", errno);
    pump->streams_.push_back(Stream{std::move(s), {}});
  }
  pump->thread_ = std::thread([p = pump.get()] { p->run(); });
  return pump;
}

OutputPump::~OutputPump() { finish(ProcessClock::now()); }

bool OutputPump::finish(ProcessClock::time_point deadline) {
  if (!thread_.joinable()) return all_ended_;
  bool ended;
  {
    std::unique_lock lock(mutex_);
    done_cv_.wait_until(lock, deadline, [this] { return done_; });
    ended = done_;
  }
  if (!ended) {
    const char byte = 0;
    // The stop pipe is empty (nothing else writes it), so this write cannot block.
    write_all(stop_.write.get(), std::string_view(&byte, 1));
  }
  thread_.join();
  std::lock_guard lock(mutex_);
  return all_ended_;
}

void OutputPump::emit_lines(Stream& stream, bool at_end) {
  size_t start = 0;
  while (true) {
    const size_t nl = stream.pending.find('\n', start);
    if (nl == std::string::npos) break;
    std::string line = stream.source.prefix;
    line.append(stream.pending, start, nl + 1 - start);
    write_all(stream.source.destination, line);
    start = nl + 1;
  }
  stream.pending.erase(0, start);
  while (stream.pending.size() >= kChunk || (at_end && !stream.pending.empty())) {
    const size_t n = std::min(stream.pending.size(), kChunk);
    std::string line = stream.source.prefix;
    line.append(stream.pending, 0, n);
    line.push_back('\n');
    write_all(stream.source.destination, line);
    stream.pending.erase(0, n);
  }
}

bool OutputPump::pump_once(Stream& stream, int max_reads) {
  char buffer[kChunk];
  for (int reads = 0; reads < max_reads;) {
    const ssize_t n = ::read(stream.source.fd.get(), buffer, sizeof(buffer));
    if (n > 0) {
      stream.pending.append(buffer, static_cast<size_t>(n));
      emit_lines(stream, false);
      ++reads;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return true;
    emit_lines(stream, true);  // end of file, or an error that ends this stream
    return false;
  }
  return true;
}

void OutputPump::run() {
  bool stop_requested = false;
  while (!stop_requested) {
    std::vector<pollfd> fds;
    std::vector<Stream*> open;
    for (Stream& s : streams_) {
      if (!s.source.fd.valid()) continue;
      fds.push_back(pollfd{s.source.fd.get(), POLLIN, 0});
      open.push_back(&s);
    }
    if (open.empty()) break;
    fds.push_back(pollfd{stop_.read.get(), POLLIN, 0});
    // Woken by output, end of file or the stop pipe; finish() bounds how long anyone waits.
    absl::StatusOr<int> ready = poll_until(fds, ProcessClock::time_point::max());
    if (!ready.ok()) break;
    stop_requested = fds.back().revents != 0;
    for (size_t i = 0; i < open.size(); ++i) {
      if (fds[i].revents == 0 && !stop_requested) continue;
      // One read per wake-up keeps a chatty worker from starving the others; the last pass
      // after a stop request drains up to 1 MiB per stream.
      if (!pump_once(*open[i], stop_requested ? kDrainReads : 1)) open[i]->source.fd.reset();
    }
  }
  bool all_ended = true;
  for (Stream& s : streams_) {
    if (!s.source.fd.valid()) continue;
    all_ended = false;
    emit_lines(s, true);
  }
  std::lock_guard lock(mutex_);
  done_ = true;
  all_ended_ = all_ended;
  done_cv_.notify_all();
}

}  // namespace exl3
