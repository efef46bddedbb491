// Worker control loop over the coordinator's Session stream: registration (CPU or CUDA device
// facts), shard loading onto the rank's backend with its collective group, steps, memory reports.
#include "worker/service/worker_service.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/worker.grpc.pb.h"
#include "worker/comm/all_reduce_mode.h"
#include "worker/comm/cluster_secret.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/grpc_store.h"
#include "worker/engine.h"
#include "worker/loader/model_fingerprint.h"
#include "worker/service/command_reader.h"
#include "worker/service/coordinator_watch.h"
#include "worker/service/local_address.h"
#include "worker/service/process_memory.h"
#include "worker/service/proto_convert.h"
#include "worker/service/reply_writer.h"
#include "worker/service/worker_device.h"

namespace exl3 {
namespace {

namespace pb = control::v1;
using Clock = std::chrono::steady_clock;

absl::Status from_grpc(const grpc::Status& s, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(what, ": ", s.error_message()));
}

// `status` with `what` in front of its message (same code); OK stays OK.
absl::Status annotate(const absl::Status& status, const std::string& what) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

std::string mib(uint64_t bytes) { return absl::StrCat(bytes / 1048576, " MiB"); }

class WorkerSession {
 public:
  WorkerSession(const WorkerOptions& options, std::shared_ptr<grpc::Channel> channel)
      : options_(options), channel_(std::move(channel)), stub_(pb::Control::NewStub(channel_)) {}

  absl::Status run(const std::string& run_id) {
    grpc::ClientContext ctx;
    auto stream = stub_->Session(&ctx);
    pb::WorkerMessage hello;
    hello.mutable_hello()->set_rank(options_.rank);
    hello.mutable_hello()->set_run_id(run_id);
    if (!stream->Write(hello)) return finish(stream.get(), "sending the session hello");
    CoordinatorWatch watch(channel_,
                           absl::StrCat("exl3-worker rank ", options_.rank, " (coordinator ", options_.coordinator, ")"),
                           std::chrono::seconds(1));
    bool after_step = false;  // the last command was a step, answered at step_answered
    Clock::time_point step_answered;
    // Results are written by their own thread: the next command starts while one is written.
    ReplyWriter writer(stream.get());
    // Commands are read on their own thread too, so the connection answers keepalive pings while
    // a command runs.
    CommandReader reader(stream.get(), &ctx);
    while (std::optional<pb::Command> next = reader.next()) {
      const pb::Command& cmd = *next;
      if (after_step && cmd.has_step()) step_gaps_.add(Clock::now() - step_answered);
      after_step = false;
      pb::WorkerMessage reply;
      pb::CommandResult* result = reply.mutable_result();
      result->set_command_id(cmd.command_id());
      watch.command_started();
      const absl::Status status = handle(cmd, result);
      watch.command_finished();
      result->set_code(static_cast<int>(status.code()));
      result->set_message(std::string(status.message()));
      if (!writer.send(std::move(reply))) {
        writer.close();
        reader.stop();
        return finish(stream.get(), "sending a command result");
      }
      if (cmd.has_step()) {
        after_step = true;
        step_answered = Clock::now();
      }
      if (cmd.has_shutdown()) {
        if (!writer.close()) {
          reader.stop();
          return finish(stream.get(), "sending a command result");
        }
        stream->WritesDone();
        return absl::OkStatus();
      }
      // A failed collective leaves the group unusable: stop so the launcher tears it down (after
      // the result saying why is written).
      if (!status.ok() && cmd.has_step()) {
        writer.close();
        return annotate(status, absl::StrCat("rank ", options_.rank));
      }
    }
    writer.close();
    reader.stop();
    return finish(stream.get(), "the coordinator closed the session");
  }

 private:
  // The address the CPU collectives bind to (WorkerOptions::comm_host); "auto" falls back to the
  // coordinator's suggestion when no route toward the coordinator can be found.
  std::string collective_host(const std::string& suggested) const {
    const std::string fallback = suggested.empty() ? "127.0.0.1" : suggested;
    if (options_.comm_host == "coordinator") return fallback;
    if (options_.comm_host != "auto") return options_.comm_host;
    absl::StatusOr<std::pair<std::string, int>> coordinator = split_host_port(options_.coordinator);
    absl::StatusOr<std::string> local =
        coordinator.ok() ? local_address_toward(coordinator->first, coordinator->second) : coordinator.status();
    if (!local.ok()) {
      std::fprintf(stderr, "exl3-worker rank %d: collectives bind to %s (%s)\n", options_.rank, fallback.c_str(),
                   std::string(local.status().message()).c_str());
      return fallback;
    }
    return *local;
  }

  absl::Status finish(grpc::ClientReaderWriter<pb::WorkerMessage, pb::Command>* stream, const std::string& what) {
    const grpc::Status s = stream->Finish();
    return absl::UnavailableError(absl::StrCat("rank ", options_.rank, ": ", what, " (", s.error_message(), ")"));
  }

  absl::Status handle(const pb::Command& cmd, pb::CommandResult* result) {
    switch (cmd.kind_case()) {
      case pb::Command::kLoad: return load(cmd.load(), result->mutable_load());
      case pb::Command::kStep: return step(cmd.step(), result->mutable_step());
      case pb::Command::kRelease:
        if (engine_) engine_->release({cmd.release().seq_ids().begin(), cmd.release().seq_ids().end()});
        return absl::OkStatus();
      case pb::Command::kPing: {
        pb::MemoryReport* m = result->mutable_memory();
        if (engine_) {
          m->set_weight_bytes(static_cast<int64_t>(engine_->model().allocated_bytes()));
          m->set_cache_bytes(static_cast<int64_t>(engine_->cache_bytes()));
        }
        if (cuda() && backend_) {
          const MeasuredDeviceMemory d = measure_cuda_memory(*backend_);
          m->set_memory_used_bytes(static_cast<int64_t>(d.used_bytes));
          m->set_device_allocated_bytes(static_cast<int64_t>(d.allocated_bytes));
          m->set_device_cap_bytes(static_cast<int64_t>(d.cap_bytes));
          m->set_device_total_bytes(static_cast<int64_t>(d.total_bytes));
        } else {
          m->set_memory_used_bytes(resident_bytes());
        }
        return absl::OkStatus();
      }
      case pb::Command::kShutdown:
        std::fprintf(stderr, "exl3-worker rank %d: shutting down: %s\n", options_.rank, cmd.shutdown().reason().c_str());
        if (!step_gaps_.us.empty()) {
          std::fprintf(stderr,
                       "exl3-worker rank %d: waited for the next step after answering one: %zu times, p50 %.1f us, "
                       "p90 %.1f us, mean %.1f us (gaps of %.0f ms or more, idle time, not counted)\n",
                       options_.rank, step_gaps_.us.size(), step_gaps_.percentile(50), step_gaps_.percentile(90),
                       step_gaps_.mean(), std::chrono::duration<double, std::milli>(StepGaps::kIdle).count());
        }
        return absl::OkStatus();
      case pb::Command::KIND_NOT_SET: break;
    }
    return absl::InvalidArgumentError("empty command");
  }

  bool cuda() const { return options_.backend == "cuda"; }

  // The job's int8-activation mode: the LoadShard's, which must agree with this worker's
  // --int8-activations when both are set (one mode for every worker of a job).
  absl::StatusOr<Int8Activations> job_int8_activations(const pb::LoadShard& load) const {
    if (load.int8_activations().empty()) return options_.int8_activations.value_or(Int8Activations::kOff);
    EXL3_ASSIGN_OR_RETURN(const Int8Activations mode,
                          parse_int8_activations(load.int8_activations(), "LoadShard.int8_activations"));
    if (options_.int8_activations.has_value() && *options_.int8_activations != mode) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank ", options_.rank, " was started with --int8-activations ",
          int8_activations_name(*options_.int8_activations), " but the coordinator runs the job with ",
          int8_activations_name(mode), ": every worker of a job uses one mode (set it on exl3-coordinator / "
          "exl3-launch, or drop the worker's flag)"));
    }
    return mode;
  }

  // The job's all-reduce: LoadShard.all_reduce (empty = nccl) and, for oneshot, the largest part in
  // KiB that goes one-shot (LoadShard.all_reduce_oneshot_max_kib, 0 = 256). A CPU worker of a group
  // all-reduces through Gloo, so oneshot there is refused, never ignored.
  struct JobAllReduce {
    AllReduceMode mode = AllReduceMode::kNccl;
    int32_t oneshot_max_kib = kAllReduceOneshotDefaultMaxKib;
  };
  absl::StatusOr<JobAllReduce> job_all_reduce(const pb::LoadShard& load) const {
    JobAllReduce job;
    if (!load.all_reduce().empty()) {
      EXL3_ASSIGN_OR_RETURN(job.mode, parse_all_reduce_mode(load.all_reduce(), "LoadShard.all_reduce"));
    }
    if (load.all_reduce_oneshot_max_kib() != 0) {
      EXL3_RETURN_IF_ERROR(validate_all_reduce_oneshot_max_kib(load.all_reduce_oneshot_max_kib(),
                                                               "LoadShard.all_reduce_oneshot_max_kib"));
      job.oneshot_max_kib = load.all_reduce_oneshot_max_kib();
    }
    if (job.mode == AllReduceMode::kOneshot && !cuda() && options_.world_size > 1) {
      return absl::InvalidArgumentError("--all-reduce oneshot needs GPU workers (CPU workers all-reduce through Gloo)");
    }
    return job;
  }

  // How this rank all-reduces, for its "loading" line.
  std::string all_reduce_description(const JobAllReduce& job) const {
    if (options_.world_size == 1) return "none (one rank)";
    if (!cuda()) return "gloo";
    if (job.mode == AllReduceMode::kNccl) return "nccl";
    return absl::StrCat("oneshot (parts up to ", job.oneshot_max_kib, " KiB; larger ones through NCCL)");
  }

  absl::Status load(const pb::LoadShard& load, pb::LoadResult* out) {
    if (engine_) return absl::FailedPreconditionError("a shard is already loaded");
    const auto t0 = Clock::now();
    const ModelShard shard = shard_from_proto(load.plan());
    if (shard.rank != options_.rank || shard.world_size != options_.world_size) {
      return absl::InvalidArgumentError(absl::StrCat("plan for rank ", shard.rank, "/", shard.world_size,
                                                     " sent to rank ", options_.rank, "/", options_.world_size));
    }
    // --gpus means NCCL, CPU workers mean Gloo: a mismatch is refused, never bridged.
    const std::string comm_backend = cuda() ? "nccl" : "gloo";
    if (options_.world_size > 1 && load.comm_backend() != comm_backend) {
      return absl::InvalidArgumentError(absl::StrCat("comm backend \"", load.comm_backend(), "\" is not available on a ",
                                                     options_.backend, " worker (it uses ", comm_backend, ")"));
    }
    EXL3_ASSIGN_OR_RETURN(const Int8Activations int8_activations, job_int8_activations(load));
    EXL3_ASSIGN_OR_RETURN(const JobAllReduce all_reduce, job_all_reduce(load));
    if (cuda()) {
      absl::StatusOr<std::shared_ptr<Backend>> backend = make_rank_cuda_backend(
          options_.rank, options_.device, static_cast<uint64_t>(load.device_cap_bytes()), int8_activations);
      if (!backend.ok()) {
        return annotate(backend.status(),
                        absl::StrCat("creating the CUDA backend on device ", options_.device, " (allocator cap ",
                                     mib(static_cast<uint64_t>(load.device_cap_bytes())), " of the rank's ",
                                     mib(static_cast<uint64_t>(load.cap_bytes())), " cap)"));
      }
      backend_ = *std::move(backend);
    } else {
      CpuBackendOptions co;
      co.int8_activations = int8_activations;
      backend_ = std::shared_ptr<Backend>(make_cpu_backend(co));
    }
    if (options_.world_size > 1) {
      store_ = std::make_unique<GrpcStoreClient>(channel_);
      const auto timeout = std::chrono::milliseconds(load.collective_timeout_ms() > 0 ? load.collective_timeout_ms() : 30000);
      if (cuda()) {
        RankNcclOptions no;
        no.rank = options_.rank;
        no.world_size = options_.world_size;
        no.device = options_.device;
        no.prefix = load.store_prefix();
        no.timeout = timeout;
        no.init_timeout =
            std::chrono::milliseconds(load.comm_init_timeout_ms() > 0 ? load.comm_init_timeout_ms() : 60000);
        absl::StatusOr<std::unique_ptr<Communicator>> comm = make_rank_nccl_communicator(no, *backend_, *store_);
        if (!comm.ok()) {
          return annotate(comm.status(), absl::StrCat("joining the NCCL group of ", options_.world_size,
                                                      " ranks (init timeout ", no.init_timeout.count(), " ms)"));
        }
        comm_ = *std::move(comm);
        if (all_reduce.mode == AllReduceMode::kOneshot) {
          absl::StatusOr<std::unique_ptr<Communicator>> oneshot = make_rank_oneshot_communicator(
              no, int64_t{all_reduce.oneshot_max_kib} << 10, *backend_, std::move(comm_), *store_);
          if (!oneshot.ok()) {
            return annotate(oneshot.status(),
                            absl::StrCat("setting up the one-shot all-reduce of ", options_.world_size,
                                         " ranks (parts up to ", all_reduce.oneshot_max_kib, " KiB, init timeout ",
                                         no.init_timeout.count(), " ms; --all-reduce nccl avoids it)"));
          }
          comm_ = *std::move(oneshot);
        }
      } else {
        GlooOptions go;
        go.rank = options_.rank;
        go.world_size = options_.world_size;
        go.host = collective_host(load.comm_host());
        go.prefix = load.store_prefix();
        go.timeout = timeout;
        EXL3_ASSIGN_OR_RETURN(comm_, make_gloo_communicator(go, *store_));
      }
    }
    if (cuda() && load.plan().weight_bytes() + load.plan().cache_bytes() > 0) {
      // Weights and KV cache come from one block of exactly the planned size (plus 256-byte
      // alignment of every tensor), not one 2 MiB-granular cudaMalloc each.
      const uint64_t tensors = 40 * static_cast<uint64_t>(shard.end_layer - shard.first_layer) + 64;
      const uint64_t pool = static_cast<uint64_t>(load.plan().weight_bytes() + load.plan().cache_bytes()) + 256 * tensors;
      EXL3_RETURN_IF_ERROR(annotate(backend_->reserve_pool(pool), "reserving the weights and KV cache pool"));
    }
    const std::string model_dir = options_.model_dir.empty() ? load.model_dir() : options_.model_dir;
    std::fprintf(stderr,
                 "exl3-worker rank %d: loading %s (layers %lld-%lld) on %s, int8 activations %s, all-reduce %s\n",
                 options_.rank, model_dir.c_str(), static_cast<long long>(shard.first_layer),
                 static_cast<long long>(shard.end_layer) - 1, backend_->description().c_str(),
                 int8_activations_name(int8_activations).c_str(), all_reduce_description(all_reduce).c_str());
    EXL3_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::load_shard(model_dir, shard, backend_));
    EngineOptions eo;
    eo.num_pages = load.num_pages();
    eo.page_size = load.page_size();
    if (load.max_step_tokens() > 0) eo.max_step_tokens = load.max_step_tokens();
    if (load.max_seqs() > 0) eo.max_seqs = load.max_seqs();
    if (load.max_logit_rows() > 0) eo.max_logit_rows = load.max_logit_rows();
    eo.step_graphs = options_.step_graphs;
    eo.cache_bits.k = load.cache_k_bits() > 0 ? load.cache_k_bits() : 16;  // 0 = unset: full precision
    eo.cache_bits.v = load.cache_v_bits() > 0 ? load.cache_v_bits() : 16;
    EXL3_RETURN_IF_ERROR(validate_kv_cache_bits(eo.cache_bits, "LoadShard cache bits (K,V)"));
    std::unique_ptr<DraftModel> draft;
    if (!load.draft_model_dir().empty()) {
      eo.draft_rank = load.draft_rank();
      if (eo.draft_rank < 0 || eo.draft_rank >= options_.world_size) {
        return absl::InvalidArgumentError(absl::StrCat("LoadShard draft_rank ", eo.draft_rank, " outside [0, ",
                                                       options_.world_size, ")"));
      }
      if (eo.draft_rank == options_.rank) {
        std::fprintf(stderr, "exl3-worker rank %d: loading the draft model %s\n", options_.rank,
                     load.draft_model_dir().c_str());
        StepLimits limits;
        limits.max_step_tokens = eo.max_step_tokens;
        limits.max_seqs = eo.max_seqs;
        limits.max_pages_per_seq = eo.num_pages;
        limits.max_logit_rows = eo.max_seqs;
        const KvCacheBits draft_bits{load.draft_cache_k_bits() > 0 ? load.draft_cache_k_bits() : 16,
                                     load.draft_cache_v_bits() > 0 ? load.draft_cache_v_bits() : 16};
        EXL3_RETURN_IF_ERROR(validate_kv_cache_bits(draft_bits, "LoadShard draft cache bits (K,V)"));
        EXL3_ASSIGN_OR_RETURN(draft, DraftModel::load(load.draft_model_dir(), backend_, eo.num_pages, eo.page_size,
                                                      limits, model->config().vocab_size, draft_bits));
      }
    }
    EXL3_ASSIGN_OR_RETURN(engine_, Engine::create(std::move(model), eo, comm_.get(), std::move(draft)));
    out->set_weight_bytes(static_cast<int64_t>(engine_->model().allocated_bytes()));
    out->set_cache_bytes(static_cast<int64_t>(engine_->cache_bytes()));
    out->set_workspace_bytes(static_cast<int64_t>(engine_->model().workspace_bytes()));
    out->set_device(backend_->description());
    EXL3_ASSIGN_OR_RETURN(const std::vector<ModelFileFingerprint> files, fingerprint_model(model_dir));
    for (const ModelFileFingerprint& f : files) {
      pb::ModelFile* m = out->add_model_files();
      m->set_name(f.name);
      m->set_bytes(f.bytes);
      m->set_hash(f.hash);
    }
    out->set_load_seconds(std::chrono::duration<double>(Clock::now() - t0).count());
    std::fprintf(stderr,
                 "exl3-worker rank %d: loaded: %.1f MiB weights, %.1f MiB cache (K,V bits %s), %.1f MiB workspace in "
                 "%.2f s\n",
                 options_.rank, out->weight_bytes() / 1048576.0, out->cache_bytes() / 1048576.0,
                 kv_cache_bits_name(eo.cache_bits).c_str(), out->workspace_bytes() / 1048576.0, out->load_seconds());
    if (cuda()) {
      EXL3_RETURN_IF_ERROR(annotate(backend_->synchronize(), "after loading"));
      const MeasuredDeviceMemory d = measure_cuda_memory(*backend_);
      out->set_device_allocated_bytes(static_cast<int64_t>(d.allocated_bytes));
      out->set_device_used_bytes(static_cast<int64_t>(d.used_bytes));
      out->set_device_total_bytes(static_cast<int64_t>(d.total_bytes));
      std::fprintf(stderr, "exl3-worker rank %d: %s\n", options_.rank, d.text.c_str());
    }
    return absl::OkStatus();
  }

  absl::Status step(const pb::Step& step, pb::StepResult* out) {
    if (!engine_) return absl::FailedPreconditionError("step before load");
    const auto t0 = Clock::now();
    StepInput input = step_from_proto(step);
    EXL3_RETURN_IF_ERROR(engine_->take_last_samples(input));
    EXL3_ASSIGN_OR_RETURN(const StepOutput result, engine_->run_step(input));
    out->set_step_id(step.step_id());
    for (size_t i = 0; i < result.tokens.size(); ++i) {
      pb::SequenceTokens* st = out->add_sequences();
      st->set_seq_id(result.tokens[i].first);
      st->mutable_token_ids()->Add(result.tokens[i].second.begin(), result.tokens[i].second.end());
      if (i < result.logprobs.size()) logprobs_to_proto(result.logprobs[i], st);
    }
    for (const auto& [seq_id, logits] : result.logits) {
      pb::SequenceLogits* sl = out->add_logits();
      sl->set_seq_id(seq_id);
      sl->set_vocab(static_cast<int32_t>(logits.dim(1)));
      sl->mutable_values()->Add(logits.data<float>(), logits.data<float>() + logits.numel());
    }
    out->set_compute_seconds(std::chrono::duration<double>(Clock::now() - t0).count());
    return absl::OkStatus();
  }

  // Time between answering a step and receiving the next one (while steps follow each other: the
  // device idles then unless the coordinator sent the next step ahead), reported at shutdown.
  struct StepGaps {
    static constexpr std::chrono::milliseconds kIdle{100};
    static constexpr size_t kKept = 1 << 20;  // the first this many gaps (4 MiB)
    std::vector<float> us;
    void add(Clock::duration gap) {
      if (gap < kIdle && us.size() < kKept) us.push_back(std::chrono::duration<float, std::micro>(gap).count());
    }
    double percentile(double p) {
      const size_t k = std::min(us.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(us.size())));
      std::nth_element(us.begin(), us.begin() + static_cast<std::ptrdiff_t>(k), us.end());
      return us[k];
    }
    double mean() const {
      double sum = 0.0;
      for (const float u : us) sum += u;
      return sum / static_cast<double>(us.size());
    }
  };

  const WorkerOptions& options_;
  StepGaps step_gaps_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Control::Stub> stub_;
  std::unique_ptr<GrpcStoreClient> store_;
  // Destroyed in reverse order: the engine (and the model's reference to the backend), then the
  // communicator (NCCL finalizes on the backend's stream), then the backend.
  std::shared_ptr<Backend> backend_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace

absl::Status run_worker(const WorkerOptions& options) {
  // The device first: a GPU that is missing fails the worker at once, before it joins the group.
  pb::RegisterRequest req;
  pb::DeviceInfo* dev = req.mutable_device();
  dev->set_backend(options.backend);
  if (options.backend == "cuda") {
    absl::StatusOr<DeviceFacts> facts = cuda_device_facts(options.device, options.cuda_visible_devices);
    if (!facts.ok()) return annotate(facts.status(), absl::StrCat("rank ", options.rank));
    dev->set_name(facts->name);
    dev->set_total_bytes(facts->total_bytes);
    dev->set_free_bytes(facts->free_bytes);
  } else {
    dev->set_name(absl::StrCat("cpu (", std::thread::hardware_concurrency(), " threads)"));
    dev->set_total_bytes(options.memory_bytes > 0 ? options.memory_bytes : total_ram_bytes());
    dev->set_free_bytes(options.memory_bytes > 0 ? options.memory_bytes : available_ram_bytes());
  }
  grpc::ChannelArguments args;
  // Notice a vanished coordinator host within seconds even while idle.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  // Every call on this channel (Register, Session, the rendezvous store) carries the cluster secret.
  auto channel = make_control_channel(options.coordinator, args, options.cluster_secret);
  const auto deadline = std::chrono::system_clock::now() + options.connect_timeout;
  if (!channel->WaitForConnected(deadline)) {
    return absl::UnavailableError(absl::StrCat("rank ", options.rank, ": cannot reach the coordinator at ",
                                               options.coordinator, " within ", options.connect_timeout.count(), " ms"));
  }
  auto stub = pb::Control::NewStub(channel);
  req.set_rank(options.rank);
  req.set_world_size(options.world_size);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  req.set_hostname(host);
  req.set_pid(getpid());
  pb::RegisterResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status s = stub->Register(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED) {
    return from_grpc(s, absl::StrCat("rank ", options.rank, ": the coordinator at ", options.coordinator,
                                     " refused this worker (give it the run's secret with ", kClusterSecretFlag,
                                     ")"));
  }
  if (!s.ok()) return from_grpc(s, absl::StrCat("rank ", options.rank, ": registration refused"));
  std::fprintf(stderr, "exl3-worker rank %d: registered with %s (run %s)\n", options.rank, options.coordinator.c_str(),
               resp.run_id().c_str());
  WorkerSession session(options, channel);
  return session.run(resp.run_id());
}

}  // namespace exl3
