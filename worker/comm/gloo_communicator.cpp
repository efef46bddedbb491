// Gloo backend of the Communicator: a full mesh of TCP pairs set up through the rendezvous store,
// Gloo's collectives underneath, every Gloo exception turned into an absl::Status here. Also the
// single-rank communicator, which shares the argument checks.
#include "worker/comm/gloo_communicator.h"

#include <algorithm>
#include <exception>
#include <memory>
#include <span>
#include <system_error>
#include <utility>

#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "worker/comm/collective_args.h"

namespace exl3 {

namespace {

// Slot prefix of our point-to-point messages; Gloo's own collectives use prefixes 0x01..0x08.
constexpr uint8_t kSendRecvSlotPrefix = 0x40;

// ---- argument checks shared by both backends here ----------------------------------------------

absl::Status check_all_gather_args(int rank, int world_size, std::span<const float> send,
                                   std::span<float> recv, std::span<const int64_t> counts) {
  return check_all_gather_counts(rank, world_size, static_cast<int64_t>(send.size()),
                                 static_cast<int64_t>(recv.size()), counts);
}

// ---- Gloo exceptions to status ------------------------------------------------------------------

// Gloo reports both "peer gone" and "peer too slow" as IoException; only the text differs
// ("Timed out waiting 1000ms for recv operation", "Connect timeout", "Connection closed by peer").
absl::Status status_from_current_exception(const std::string& what) {
  try {
    throw;
  } catch (const GlooStoreError& e) {
    return absl::Status(e.status().code(), absl::StrCat(what, ": ", e.status().message()));
  } catch (const gloo::IoException& e) {
    const std::string text = absl::AsciiStrToLower(std::string(e.what()));
    if (absl::StrContains(text, "timed out") || absl::StrContains(text, "timeout")) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": ", e.what()));
    }
    return absl::UnavailableError(absl::StrCat(what, ": ", e.what()));
  } catch (const gloo::InvalidOperationException& e) {
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", e.what()));
  } catch (const gloo::EnforceNotMet& e) {
    return absl::InternalError(absl::StrCat(what, ": Gloo check failed: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(what, ": ", e.what()));
  } catch (...) {
    return absl::UnknownError(absl::StrCat(what, ": unknown exception from Gloo"));
  }
}

// Gloo's TCP transport writes with writev(), so writing to a peer that has gone raises SIGPIPE,
// whose default action kills the process before Gloo can report EPIPE. While this guard lives,
// SIGPIPE is blocked in the calling thread (Linux directs it at the writing thread), and one that
// was raised meanwhile is consumed before the old mask comes back. Threads Gloo starts inside
// the guard (the device's event loop) inherit the blocked mask for good. No process-wide state
// changes.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_mask_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~ScopedSigpipeBlock() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec no_wait{0, 0};
        sigtimedwait(&pipe_, nullptr, &no_wait);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_mask_;
  bool was_pending_ = false;
};

// Resolves `host` and binds a throw-away socket to it, so that a host this machine cannot listen
// on is refused with a clear status before Gloo sees it (Gloo's own failure path here throws an
// EnforceNotMet and leaks its address lookup).
absl::Status check_bindable(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gloo: cannot resolve host '", host, "': ", gai_strerror(rc)));
  }
  const std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);
  std::string error = "no address";
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = std::error_code(errno, std::generic_category()).message();
      continue;
    }
    const bool bound = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    if (!bound) error = std::error_code(errno, std::generic_category()).message();
    close(fd);
    if (bound) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("Gloo: cannot listen on host '", host, "': ", error));
}

void sum_floats(void* out, const void* a, const void* b, size_t n) {
  float* o = static_cast<float*>(out);
  const float* x = static_cast<const float*>(a);
  const float* y = static_cast<const float*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

// ---- Gloo communicator --------------------------------------------------------------------------

class GlooCommunicator final : public Communicator {
 public:
  using Communicator::all_gather;
  using Communicator::all_reduce_sum;
  using Communicator::broadcast;
  using Communicator::recv;
  using Communicator::send;
  GlooCommunicator(GlooOptions options, std::shared_ptr<gloo::rendezvous::Context> context)
      : options_(std::move(options)), context_(std::move(context)) {}

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }

  absl::Status all_reduce_sum(std::span<float> data) override {
    if (data.empty()) return usable();
    return run("all_reduce_sum", [&] {
      gloo::AllreduceOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setReduceFunction(&sum_floats);
      opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      opts.setTimeout(options_.timeout);
      gloo::allreduce(opts);
    });
  }

  absl::Status all_gather(std::span<const float> send, std::span<float> recv,
                          std::span<const int64_t> counts) override {
    EXL3_RETURN_IF_ERROR(check_all_gather_args(rank(), world_size(), send, recv, counts));
    if (recv.empty()) return usable();
    return run("all_gather", [&] {
      gloo::AllgathervOptions opts(context_);
      // Gloo copies the input into its place in the output; a rank that sends nothing has no
      // input buffer (its part of the output is empty).
      if (!send.empty()) opts.setInput(const_cast<float*>(send.data()), send.size());
      opts.setOutput(recv.data(), std::vector<size_t>(counts.begin(), counts.end()));
      opts.setTimeout(options_.timeout);
      gloo::allgatherv(opts);
    });
  }

  absl::Status broadcast(std::span<float> data, int root) override {
    EXL3_RETURN_IF_ERROR(check_root(root, world_size()));
    if (data.empty()) return usable();
    return run("broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setRoot(root);
      opts.setTimeout(options_.timeout);
      gloo::broadcast(opts);
    });
  }

  absl::Status send(std::span<const float> data, int dst_rank) override {
    EXL3_RETURN_IF_ERROR(check_peer("send", rank(), world_size(), dst_rank));
    if (data.empty()) return usable();
    return run("send to rank", dst_rank, [&] {
      // Gloo only reads a send buffer, but its buffers take a non-const pointer.
      auto buffer = context_->createUnboundBuffer(const_cast<float*>(data.data()),
                                                  data.size_bytes());
      buffer->send(dst_rank, gloo::Slot::build(kSendRecvSlotPrefix, 0));
      // waitSend throws on timeout or a broken pair; false means aborted, which we never ask.
      const bool completed = buffer->waitSend(options_.timeout);
      EXL3_CHECK(completed, "Gloo send was aborted");
    });
  }

  absl::Status recv(std::span<float> data, int src_rank) override {
    EXL3_RETURN_IF_ERROR(check_peer("recv", rank(), world_size(), src_rank));
    if (data.empty()) return usable();
    return run("recv from rank", src_rank, [&] {
      auto buffer = context_->createUnboundBuffer(data.data(), data.size_bytes());
      buffer->recv(src_rank, gloo::Slot::build(kSendRecvSlotPrefix, 0));
      const bool completed = buffer->waitRecv(options_.timeout);
      EXL3_CHECK(completed, "Gloo recv was aborted");
    });
  }

  absl::Status barrier() override {
    return run("barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(options_.timeout);
      gloo::barrier(opts);
    });
  }

 private:
  absl::Status usable() const {
    if (failed_.ok()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("communicator unusable after an earlier error: ", failed_.message()));
  }

  template <typename Op>
  absl::Status run(const char* what, Op&& op) {
    return run(what, -1, std::forward<Op>(op));
  }

  // Runs one Gloo operation (`what`, with the peer rank when there is one). The first failure is
  // kept, and all connections are closed so that the peers' pending and next operations fail at
  // once rather than at their deadlines.
  template <typename Op>
  absl::Status run(const char* what, int peer, Op&& op) {
    EXL3_RETURN_IF_ERROR(usable());
    const ScopedSigpipeBlock no_sigpipe;
    try {
      op();
      return absl::OkStatus();
    } catch (...) {
      failed_ = status_from_current_exception(
          absl::StrCat(what, peer >= 0 ? absl::StrCat(" ", peer) : std::string(), " (rank ",
                       rank(), " of ", world_size(), ")"));
    }
    try {
      context_->closeConnections();
    } catch (...) {
      const absl::Status close_status = status_from_current_exception("closing connections");
      return absl::Status(failed_.code(),
                          absl::StrCat(failed_.message(), "; ", close_status.message()));
    }
    return failed_;
  }

  const GlooOptions options_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  absl::Status failed_;
};

// ---- single rank --------------------------------------------------------------------------------

class SingleRankCommunicator final : public Communicator {
 public:
  using Communicator::all_gather;
  using Communicator::all_reduce_sum;
  using Communicator::broadcast;
  using Communicator::recv;
  using Communicator::send;
  int rank() const override { return 0; }
  int world_size() const override { return 1; }

  absl::Status all_reduce_sum(std::span<float>) override { return absl::OkStatus(); }

  absl::Status all_gather(std::span<const float> send, std::span<float> recv,
                          std::span<const int64_t> counts) override {
    EXL3_RETURN_IF_ERROR(check_all_gather_args(0, 1, send, recv, counts));
    std::copy(send.begin(), send.end(), recv.begin());
    return absl::OkStatus();
  }

  absl::Status broadcast(std::span<float>, int root) override { return check_root(root, 1); }
  absl::Status send(std::span<const float>, int dst_rank) override {
    return check_peer("send", 0, 1, dst_rank);
  }
  absl::Status recv(std::span<float>, int src_rank) override {
    return check_peer("recv", 0, 1, src_rank);
  }
  absl::Status barrier() override { return absl::OkStatus(); }
};

}  // namespace

// ---- store adapter ------------------------------------------------------------------------------

GlooStoreAdapter::GlooStoreAdapter(RendezvousStore& store, std::string prefix,
                                   std::chrono::steady_clock::time_point deadline)
    : store_(store), prefix_(std::move(prefix)), deadline_(deadline) {}

std::string GlooStoreAdapter::full_key(const std::string& key) const {
  return absl::StrCat(prefix_, "/", key);
}

std::chrono::milliseconds GlooStoreAdapter::remaining() const {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline_ - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  const absl::Status status = store_.set(full_key(key), data);
  if (!status.ok()) throw GlooStoreError(status);
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  auto values = store_.get({full_key(key)}, remaining());
  if (!values.ok()) throw GlooStoreError(values.status());
  EXL3_CHECK_EQ(values->size(), 1u, "store returned the wrong number of values");
  return std::move(values->front());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const std::string& key : keys) full.push_back(full_key(key));
  const auto values = store_.get(full, remaining());
  if (!values.ok()) throw GlooStoreError(values.status());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& /*gloo_timeout*/) {
  wait(keys);
}

// ---- factories ----------------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Communicator>> make_gloo_communicator(const GlooOptions& options,
                                                                     RendezvousStore& store) {
  if (options.world_size < 1 || options.rank < 0 || options.rank >= options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("Gloo: rank ", options.rank,
                                                   " is outside a world of ", options.world_size));
  }
  if (options.timeout <= std::chrono::milliseconds::zero()) {
    // Gloo reads a zero timeout as "wait forever".
    return absl::InvalidArgumentError(
        absl::StrCat("Gloo: timeout must be positive, got ", options.timeout.count(), " ms"));
  }
  if (options.prefix.empty()) {
    return absl::InvalidArgumentError("Gloo: the store key prefix is empty");
  }
  EXL3_RETURN_IF_ERROR(check_bindable(options.host));
  const std::string who = absl::StrCat("Gloo rank ", options.rank, " of ", options.world_size,
                                       " (store prefix '", options.prefix, "')");
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;

  // Blocks SIGPIPE for the whole set-up, and so for good in the device's event-loop thread.
  const ScopedSigpipeBlock no_sigpipe;
  std::shared_ptr<gloo::transport::Device> device;
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    device = gloo::transport::tcp::CreateDevice(attr);
  } catch (...) {
    const absl::Status status = status_from_current_exception(
        absl::StrCat(who, ": cannot open a TCP transport on host '", options.host, "'"));
    return absl::InvalidArgumentError(status.message());
  }

  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.world_size);
  // Gloo waits up to 5x the context timeout for each TCP connect, so a fifth of ours keeps every
  // connect within options.timeout. Store waits use the adapter's deadline instead.
  context->setTimeout(std::max(options.timeout / 5, std::chrono::milliseconds(1)));
  GlooStoreAdapter adapter(store, options.prefix, deadline);
  try {
    context->connectFullMesh(adapter, device);
  } catch (...) {
    return status_from_current_exception(absl::StrCat(who, ": rendezvous failed"));
  }
  // Default for any Gloo call that is not given a timeout; ours always are.
  context->setTimeout(options.timeout);
  return std::make_unique<GlooCommunicator>(options, std::move(context));
}

std::unique_ptr<Communicator> make_single_rank_communicator() {
  return std::make_unique<SingleRankCommunicator>();
}

}  // namespace exl3
