// Worker control loop over the coordinator's Session stream.
#include "worker/service/worker_service.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "proto/worker.grpc.pb.h"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/grpc_store.h"
#include "worker/engine.h"
#include "worker/service/process_memory.h"
#include "worker/service/proto_convert.h"

namespace exl3 {
namespace {

namespace pb = control::v1;
using Clock = std::chrono::steady_clock;

absl::Status from_grpc(const grpc::Status& s, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), absl::StrCat(what, ": ", s.error_message()));
}

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
    pb::Command cmd;
    while (stream->Read(&cmd)) {
      pb::WorkerMessage reply;
      pb::CommandResult* result = reply.mutable_result();
      result->set_command_id(cmd.command_id());
      const absl::Status status = handle(cmd, result);
      result->set_code(static_cast<int>(status.code()));
      result->set_message(std::string(status.message()));
      if (!stream->Write(reply)) return finish(stream.get(), "sending a command result");
      if (cmd.has_shutdown()) {
        stream->WritesDone();
        return absl::OkStatus();
      }
      // A failed collective leaves the group unusable: stop so the launcher tears it down.
      if (!status.ok() && cmd.has_step()) return status;
    }
    return finish(stream.get(), "the coordinator closed the session");
  }

 private:
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
        m->set_memory_used_bytes(resident_bytes());
        return absl::OkStatus();
      }
      case pb::Command::kShutdown:
        std::fprintf(stderr, "exl3-worker rank %d: shutting down: %s\n", options_.rank, cmd.shutdown().reason().c_str());
        return absl::OkStatus();
      case pb::Command::KIND_NOT_SET: break;
    }
    return absl::InvalidArgumentError("empty command");
  }

  absl::Status load(const pb::LoadShard& load, pb::LoadResult* out) {
    if (engine_) return absl::FailedPreconditionError("a shard is already loaded");
    const auto t0 = Clock::now();
    const ModelShard shard = shard_from_proto(load.plan());
    if (shard.rank != options_.rank || shard.world_size != options_.world_size) {
      return absl::InvalidArgumentError(absl::StrCat("plan for rank ", shard.rank, "/", shard.world_size,
                                                     " sent to rank ", options_.rank, "/", options_.world_size));
    }
    if (options_.world_size > 1) {
      if (load.comm_backend() != "gloo") {
        return absl::InvalidArgumentError(absl::StrCat("comm backend \"", load.comm_backend(),
                                                       "\" is not available on a CPU worker (use gloo)"));
      }
      store_ = std::make_unique<GrpcStoreClient>(channel_);
      GlooOptions go;
      go.rank = options_.rank;
      go.world_size = options_.world_size;
      go.host = load.comm_host().empty() ? "127.0.0.1" : load.comm_host();
      go.prefix = load.store_prefix();
      go.timeout = std::chrono::milliseconds(load.collective_timeout_ms() > 0 ? load.collective_timeout_ms() : 30000);
      EXL3_ASSIGN_OR_RETURN(comm_, make_gloo_communicator(go, *store_));
    }
    std::fprintf(stderr, "exl3-worker rank %d: loading %s (layers %lld-%lld)\n", options_.rank, load.model_dir().c_str(),
                 static_cast<long long>(shard.first_layer), static_cast<long long>(shard.end_layer) - 1);
    EXL3_ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::load_shard(load.model_dir(), shard));
    engine_ = std::make_unique<Engine>(std::move(model), EngineOptions{load.num_pages(), load.page_size()}, comm_.get());
    out->set_weight_bytes(static_cast<int64_t>(engine_->model().allocated_bytes()));
    out->set_cache_bytes(static_cast<int64_t>(engine_->cache_bytes()));
    out->set_load_seconds(std::chrono::duration<double>(Clock::now() - t0).count());
    std::fprintf(stderr, "exl3-worker rank %d: loaded: %.1f MiB weights, %.1f MiB cache in %.2f s\n", options_.rank,
                 out->weight_bytes() / 1048576.0, out->cache_bytes() / 1048576.0, out->load_seconds());
    return absl::OkStatus();
  }

  absl::Status step(const pb::Step& step, pb::StepResult* out) {
    if (!engine_) return absl::FailedPreconditionError("step before load");
    const auto t0 = Clock::now();
    EXL3_ASSIGN_OR_RETURN(const StepOutput result, engine_->run_step(step_from_proto(step)));
    out->set_step_id(step.step_id());
    for (const auto& [seq_id, tokens] : result.tokens) {
      pb::SequenceTokens* st = out->add_sequences();
      st->set_seq_id(seq_id);
      st->mutable_token_ids()->Add(tokens.begin(), tokens.end());
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

  const WorkerOptions& options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<pb::Control::Stub> stub_;
  std::unique_ptr<GrpcStoreClient> store_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Engine> engine_;
};

}  // namespace

absl::Status run_worker(const WorkerOptions& options) {
  grpc::ChannelArguments args;
  // Notice a vanished coordinator host within seconds even while idle.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 5000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetMaxReceiveMessageSize(64 << 20);
  auto channel = grpc::CreateCustomChannel(options.coordinator, grpc::InsecureChannelCredentials(), args);
  const auto deadline = std::chrono::system_clock::now() + options.connect_timeout;
  if (!channel->WaitForConnected(deadline)) {
    return absl::UnavailableError(absl::StrCat("rank ", options.rank, ": cannot reach the coordinator at ",
                                               options.coordinator, " within ", options.connect_timeout.count(), " ms"));
  }
  auto stub = pb::Control::NewStub(channel);
  pb::RegisterRequest req;
  req.set_rank(options.rank);
  req.set_world_size(options.world_size);
  pb::DeviceInfo* dev = req.mutable_device();
  dev->set_backend(options.backend);
  dev->set_name(absl::StrCat("cpu (", std::thread::hardware_concurrency(), " threads)"));
  dev->set_total_bytes(options.memory_bytes > 0 ? options.memory_bytes : total_ram_bytes());
  dev->set_free_bytes(options.memory_bytes > 0 ? options.memory_bytes : available_ram_bytes());
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  req.set_hostname(host);
  req.set_pid(getpid());
  pb::RegisterResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::Status s = stub->Register(&ctx, req, &resp);
  if (!s.ok()) return from_grpc(s, absl::StrCat("rank ", options.rank, ": registration refused"));
  std::fprintf(stderr, "exl3-worker rank %d: registered with %s (run %s)\n", options.rank, options.coordinator.c_str(),
               resp.run_id().c_str());
  WorkerSession session(options, channel);
  return session.run(resp.run_id());
}

}  // namespace exl3
