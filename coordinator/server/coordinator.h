// Coordinator: start-up and shutdown order of one serving run. start_control() loads the model's
// config, tokenizer and footprint and opens the control plane (workers may dial from then on);
// start_serving() waits for every worker, plans the shards, loads them, checks each rank's loaded
// bytes against its plan and opens the public API (with health and reflection). shutdown() stops
// in order: refuse new requests, drain, stop the workers, close the servers.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/model_footprint.h"
#include "coordinator/planner/shard_planner.h"
#include "coordinator/server/control_service.h"
#include "coordinator/server/inference_service.h"
#include "coordinator/server/request_limits.h"
#include "coordinator/server/server_credentials.h"
#include "coordinator/server/serving_loop.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "kernels/int8_activations.h"
#include "worker/comm/all_reduce_mode.h"

namespace exl3 {

struct CoordinatorOptions {
  std::string model_dir;
  int world_size = 1;
  std::string host = "127.0.0.1";          // public API (loopback only unless told otherwise)
  int port = 50051;                        // 0 = ephemeral
  // What one request may ask for and how many run at once (0 token limits = the served context).
  RequestLimits request_limits;
  // Bearer token and TLS key pair of the public API, read from their files by main.
  PublicApiSecurity security;
  std::string control_host = "127.0.0.1";  // control plane (workers dial it)
  int control_port = 0;                    // 0 = ephemeral
  // Secret every control-plane call must carry (--cluster-secret-file, read by main; exl3-launch
  // makes one per run); empty = any process reaching the control port may join.
  std::string cluster_secret;
  PlanMode mode = PlanMode::kTensorParallel;
  // What the workers compute on: kCpu (Gloo collectives) or kCuda (NCCL). Every worker must
  // register with this backend; the plan prices it.
  BackendKind backend = BackendKind::kCpu;
  std::vector<uint64_t> caps;              // per-rank byte caps; empty = each worker's reported free memory
  int64_t max_seq_len = 0;                 // 0 = the model's max_position_embeddings
  int64_t max_batch = 16;                  // sequences running at once
  // KV cache tokens (every rank caches the same pages for its own heads / layers): 0 = max_batch
  // full-length sequences, or the most pages the caps hold when that is too many (at least one
  // full-length sequence); > 0 = that many (rounded up to whole pages) or refused.
  int64_t cache_tokens = 0;
  int64_t page_size = 256;
  // KV cache widths of keys and values (--cache-bits): the planner prices pages at them and every
  // worker stores its cache at them (16 = full precision, 2..8 = quantized).
  KvCacheBits cache_bits{};
  // Int8 activations for the few-rows EXL3 matmuls (--int8-activations, kernels/int8_activations.h),
  // sent to every worker so that all ranks of the job compute alike.
  Int8Activations int8_activations = Int8Activations::kOff;
  // How GPU workers all-reduce (--all-reduce, worker/comm/all_reduce_mode.h) and the largest part
  // in KiB that goes one-shot (--all-reduce-oneshot-max-kib), sent to every worker; CPU workers
  // refuse oneshot over more than one rank.
  AllReduceMode all_reduce = AllReduceMode::kNccl;
  int32_t all_reduce_oneshot_max_kib = kAllReduceOneshotDefaultMaxKib;
  int32_t prefill_chunk = 256;
  int32_t max_queue = 256;
  int32_t decode_steps = 1;
  // Keep the next step in flight while one runs (SchedulerConfig::pipeline); ignored with a draft model.
  bool step_pipeline = true;
  bool prefix_cache = true;  // reuse KV pages of common prompt prefixes (SchedulerConfig::prefix_cache)
  // Speculative decoding (--draft-model, --draft-tokens): a smaller model with the same tokenizer,
  // loaded whole by the lowest rank with the head, proposes draft_tokens tokens per decode step.
  // Empty = off.
  std::string draft_model_dir;
  int32_t draft_tokens = 4;
  std::chrono::milliseconds worker_timeout{60000};   // all workers registered and connected
  std::chrono::milliseconds load_timeout{600000};    // shards loaded
  std::chrono::milliseconds step_timeout{60000};     // one step on every rank
  std::chrono::milliseconds comm_init_timeout{60000};  // a GPU group's NCCL set-up
};

class Coordinator {
 public:
  explicit Coordinator(CoordinatorOptions options);
  ~Coordinator();

  absl::Status start_control();
  int control_port() const { return control_port_; }
  // The plan for the given caps (no workers needed): used by --plan-only.
  absl::StatusOr<std::string> plan_table(const std::vector<uint64_t>& caps);
  absl::Status start_serving();
  int public_port() const { return public_port_; }
  const ModelConfig& config() const { return footprint_.config; }

  // Blocks until the worker group fails (returns its status) or request_stop() (returns OK).
  absl::Status wait();
  void request_stop();
  // The worker group's failure, if any (non-blocking).
  absl::Status failure();
  void shutdown(std::chrono::milliseconds drain_timeout);

 private:
  PlannerOptions planner_options(const std::vector<uint64_t>& caps) const;
  // Tokens a decoding sequence runs per step: 1, or 1 + --draft-tokens with a draft model.
  int64_t decode_tokens_per_step() const;
  // Checks --draft-model against the model (vocabulary, tokenizer.json) and prices it.
  absl::Status load_draft_footprint(const ModelConfig& target);
  absl::Status check_registrations() const;
  void on_group_failure(const absl::Status& status);
  void fill_worker_stats(v1::StatsResponse* response);

  CoordinatorOptions options_;
  std::optional<Tokenizer> tokenizer_;
  ModelFootprint footprint_;
  std::optional<ModelFootprint> draft_footprint_;  // with --draft-model
  std::vector<RankPlan> plans_;
  std::vector<uint64_t> caps_;                   // the caps the plan was made with
  std::vector<pb::LoadResult> loaded_;           // what each rank reported after loading
  std::shared_ptr<WorkerGroup> group_;
  ControlService control_service_;
  std::unique_ptr<grpc::Server> control_server_;
  std::unique_ptr<ServingLoop> loop_;
  std::unique_ptr<InferenceService> inference_service_;
  std::unique_ptr<grpc::Server> public_server_;
  int control_port_ = 0;
  int public_port_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_requested_ = false;
  absl::Status failure_;
  bool shut_down_ = false;
};

}  // namespace exl3
