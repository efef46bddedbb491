// Coordinator start-up, planning, loading (CPU workers over Gloo, CUDA workers over NCCL) and
// ordered shutdown.
#include "coordinator/server/coordinator.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/planner/byte_units.h"
#include "coordinator/planner/plan_table.h"
#include "coordinator/server/device_fit.h"
#include "coordinator/server/listen_port.h"
#include "coordinator/server/model_check.h"
#include "coordinator/server/plan_proto.h"
#include "worker/engine.h"
#include "worker/loader/safetensors.h"
#include "worker/service/proto_convert.h"

namespace exl3 {
namespace {

std::string random_run_id() {
  std::random_device rd;
  return absl::StrCat("run-", std::to_string(rd()), "-", std::to_string(rd()));
}

// The bytes of a file, or NOT_FOUND naming it.
absl::StatusOr<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string mib(uint64_t bytes) { return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / 1048576.0); }

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options) : options_(std::move(options)) {}

Coordinator::~Coordinator() { shutdown(std::chrono::milliseconds(0)); }

PlannerOptions Coordinator::planner_options(const std::vector<uint64_t>& caps) const {
  PlannerOptions p;
  p.mode = options_.mode;
  p.caps = caps;
  p.max_seq_len = options_.max_seq_len;
  p.max_batch = options_.max_batch;
  p.page_size = options_.page_size;
  p.step_tokens = std::max<int64_t>(options_.prefill_chunk, options_.max_batch * decode_tokens_per_step());
  p.requested_cache_tokens = options_.cache_tokens;
  if (options_.all_reduce == AllReduceMode::kOneshot) {
    p.oneshot_all_reduce_max_bytes = int64_t{options_.all_reduce_oneshot_max_kib} << 10;
  }
  if (draft_footprint_) {
    p.logit_rows_per_seq = decode_tokens_per_step();
    p.draft = &*draft_footprint_;
  }
  return p;
}

absl::Status Coordinator::start_control() {
  // Ports first: a port in use fails before the model loads or any worker starts.
  EXL3_RETURN_IF_ERROR(check_port_free(options_.host, options_.port, "public API, --port"));
  EXL3_RETURN_IF_ERROR(check_port_free(options_.control_host, options_.control_port, "control plane, --control-port"));
  EXL3_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config(options_.model_dir));
  EXL3_ASSIGN_OR_RETURN(SafetensorsCollection tensors, SafetensorsCollection::open_dir(options_.model_dir));
  EXL3_ASSIGN_OR_RETURN(footprint_, build_model_footprint(config, options_.backend, &tensors));
  EXL3_RETURN_IF_ERROR(footprint_.set_cache_bits(options_.cache_bits));
  if (!options_.draft_model_dir.empty()) EXL3_RETURN_IF_ERROR(load_draft_footprint(config));
  EXL3_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::from_model_dir(options_.model_dir));
  tokenizer_.emplace(std::move(tok));
  if (options_.max_seq_len <= 0) options_.max_seq_len = config.max_position_embeddings;
  if (options_.max_seq_len > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("--max-seq-len ", options_.max_seq_len, " exceeds the model's ",
                                                   config.max_position_embeddings, " positions"));
  }
  EXL3_ASSIGN_OR_RETURN(options_.request_limits,
                        resolve_request_limits(options_.request_limits, static_cast<int32_t>(options_.max_seq_len)));
  group_ = std::make_shared<WorkerGroup>(options_.world_size, random_run_id());
  control_service_.set_group(group_);
  control_service_.set_cluster_secret(options_.cluster_secret);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options_.control_host, ":", options_.control_port),
                           grpc::InsecureServerCredentials(), &control_port_);
  builder.RegisterService(&control_service_);
  disable_port_sharing(builder);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 1000);
  // A worker whose link dies silently (no FIN, no RST) ends its session within ~3 s: ping every
  // second, also mid-step while the worker sends nothing, and close on no ack within 2 s.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  control_server_ = builder.BuildAndStart();
  if (!control_server_ || control_port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.control_host, ":", options_.control_port,
                                               " for the control plane (--control-port): the port is in use or the "
                                               "address is not this host's"));
  }
  return absl::OkStatus();
}

int64_t Coordinator::decode_tokens_per_step() const {
  return options_.draft_model_dir.empty() ? 1 : options_.draft_tokens + 1;
}

absl::Status Coordinator::load_draft_footprint(const ModelConfig& target) {
  const std::string& dir = options_.draft_model_dir;
  if (options_.draft_tokens < 1 || options_.draft_tokens > kMaxDraftTokens) {
    return absl::InvalidArgumentError(absl::StrCat("--draft-tokens ", options_.draft_tokens, " outside [1, ",
                                                   kMaxDraftTokens, "]"));
  }
  EXL3_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config(dir));
  if (config.vocab_size != target.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("--draft-model ", dir, " has a vocabulary of ", config.vocab_size,
                                                   " tokens, the model ", target.vocab_size,
                                                   ": a draft must share the model's tokenizer"));
  }
  EXL3_ASSIGN_OR_RETURN(const std::string own, read_text_file(options_.model_dir + "/tokenizer.json"));
  EXL3_ASSIGN_OR_RETURN(const std::string draft, read_text_file(dir + "/tokenizer.json"));
  if (own != draft) {
    return absl::InvalidArgumentError(absl::StrCat("--draft-model ", dir, ": its tokenizer.json differs from ",
                                                   options_.model_dir, "/tokenizer.json; a draft must share the "
                                                   "model's tokenizer"));
  }
  EXL3_ASSIGN_OR_RETURN(SafetensorsCollection tensors, SafetensorsCollection::open_dir(dir));
  EXL3_ASSIGN_OR_RETURN(ModelFootprint fp, build_model_footprint(config, options_.backend, &tensors));
  // The draft's cache takes --cache-bits where its KV heads allow them, else stays full precision
  // (set on a copy: a refusal leaves the footprint as it was).
  ModelFootprint quantized = fp;
  if (options_.cache_bits.quantized() && quantized.set_cache_bits(options_.cache_bits).ok()) {
    fp = std::move(quantized);
  } else if (options_.cache_bits.quantized()) {
    std::fprintf(stderr,
                 "coordinator: the draft model's KV heads cannot take --cache-bits %s: its cache stays full "
                 "precision\n",
                 kv_cache_bits_name(options_.cache_bits).c_str());
  }
  draft_footprint_ = std::move(fp);
  return absl::OkStatus();
}

absl::StatusOr<std::string> Coordinator::plan_table(const std::vector<uint64_t>& caps) {
  const PlannerOptions popts = planner_options(caps);
  EXL3_ASSIGN_OR_RETURN(const std::vector<RankPlan> plans, plan_shards(footprint_, popts));
  return format_plan_table(footprint_, plans, caps, &popts);
}

absl::Status Coordinator::check_registrations() const {
  const std::string want = backend_name(options_.backend);
  const auto regs = group_->registrations();
  for (int r = 0; r < static_cast<int>(regs.size()); ++r) {
    if (regs[r].device().backend() != want) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rank ", r, " registered a ", regs[r].device().backend(), " worker (", regs[r].device().name(), " on ",
          regs[r].hostname(), "), but this run serves on ", want, " workers (", want == "cuda" ? "NCCL" : "Gloo",
          " collectives); start every worker with --backend ", want));
    }
  }
  return absl::OkStatus();
}

absl::Status Coordinator::start_serving() {
  std::fprintf(stderr, "coordinator: waiting for %d worker(s) on %s:%d\n", options_.world_size,
               options_.control_host.c_str(), control_port_);
  EXL3_RETURN_IF_ERROR(group_->wait_ready(options_.worker_timeout));
  EXL3_RETURN_IF_ERROR(check_registrations());
  std::vector<uint64_t> caps = options_.caps;
  if (caps.empty()) {
    for (const pb::RegisterRequest& r : group_->registrations()) caps.push_back(r.device().free_bytes());
  }
  if (static_cast<int>(caps.size()) != options_.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("--split gives ", caps.size(), " caps for ", options_.world_size,
                                                   " workers"));
  }
  PlannerOptions popts = planner_options(caps);
  EXL3_ASSIGN_OR_RETURN(plans_, plan_shards(footprint_, popts));
  caps_ = caps;
  // Every rank has the same page count, which the plan may have lowered to fit the caps; from here
  // on the options price exactly that cache (workers, scheduler and reserve agree).
  popts.pages = plans_.front().num_pages;
  std::fprintf(stderr, "%s", format_plan_table(footprint_, plans_, caps, &popts).c_str());
  EXL3_RETURN_IF_ERROR(check_plans_fit_devices(plans_, group_->registrations(), kCudaOverheads.context_bytes));
  if (draft_footprint_) {
    std::fprintf(stderr,
                 "coordinator: rank %d holds the draft model %s: %s (weights, KV cache at %s bits, "
                 "workspace), counted in its workspace column; it proposes %d tokens per decode step\n",
                 draft_model_rank(popts), options_.draft_model_dir.c_str(),
                 format_bytes(draft_model_bytes(*draft_footprint_, popts)).c_str(),
                 kv_cache_bits_name(draft_footprint_->cache_bits).c_str(), options_.draft_tokens);
  }
  if (cache_was_fitted(popts, popts.pages)) {
    std::fprintf(stderr, "coordinator: %s\n", kv_cache_summary(popts, popts.pages).c_str());
  }
  const bool cuda = options_.backend == BackendKind::kCuda;
  // A CUDA worker's allocator may use the cap minus what the planner set aside outside it (CUDA
  // context, NCCL buffers), so the whole process stays within the cap.
  const uint64_t outside = cuda ? cuda_plan_reserve(footprint_, popts).outside_allocator() : 0;
  const StepShape step = popts.step_shape();

  // Speculative decoding: the lowest rank with the head drafts and verifies.
  int draft_rank = 0;
  while (draft_rank + 1 < options_.world_size && !plans_[draft_rank].has_head) ++draft_rank;
  std::vector<pb::Command> loads(options_.world_size);
  for (int r = 0; r < options_.world_size; ++r) {
    pb::LoadShard* l = loads[r].mutable_load();
    l->set_model_dir(options_.model_dir);
    *l->mutable_plan() = plan_to_proto(plans_[r]);
    l->set_num_pages(static_cast<int32_t>(popts.num_pages()));
    l->set_page_size(static_cast<int32_t>(options_.page_size));
    l->set_comm_backend(cuda ? "nccl" : "gloo");
    l->set_store_prefix(absl::StrCat(group_->run_id(), cuda ? "/nccl" : "/gloo"));
    l->set_collective_timeout_ms(static_cast<int32_t>(options_.step_timeout.count()));
    l->set_comm_host(options_.control_host);
    l->set_max_step_tokens(static_cast<int32_t>(step.tokens));
    l->set_max_seqs(static_cast<int32_t>(step.seqs));
    l->set_max_logit_rows(static_cast<int32_t>(step.logit_rows));
    l->set_cache_k_bits(options_.cache_bits.k);
    l->set_cache_v_bits(options_.cache_bits.v);
    l->set_int8_activations(int8_activations_name(options_.int8_activations));
    l->set_all_reduce(all_reduce_mode_name(options_.all_reduce));
    l->set_all_reduce_oneshot_max_kib(options_.all_reduce_oneshot_max_kib);
    if (draft_footprint_) {
      l->set_draft_model_dir(options_.draft_model_dir);
      l->set_draft_rank(draft_rank);
      l->set_draft_cache_k_bits(draft_footprint_->cache_bits.k);
      l->set_draft_cache_v_bits(draft_footprint_->cache_bits.v);
    }
    if (cuda) {
      l->set_cap_bytes(static_cast<int64_t>(caps[r]));
      l->set_device_cap_bytes(static_cast<int64_t>(caps[r] > outside ? caps[r] - outside : caps[r]));
      l->set_comm_init_timeout_ms(static_cast<int32_t>(options_.comm_init_timeout.count()));
    }
  }
  EXL3_ASSIGN_OR_RETURN(const std::vector<pb::CommandResult> loaded, group_->call(loads, options_.load_timeout));
  // A worker on another host loads its own copy (exl3-worker --model); it must be this one.
  EXL3_ASSIGN_OR_RETURN(const std::vector<ModelFileFingerprint> own_model, fingerprint_model(options_.model_dir));
  EXL3_RETURN_IF_ERROR(check_worker_models(own_model, loaded, group_->rank_names()));
  loaded_.clear();
  for (int r = 0; r < options_.world_size; ++r) {
    const pb::LoadResult& lr = loaded[r].load();
    loaded_.push_back(lr);
    const uint64_t planned = plans_[r].weight_bytes, got = static_cast<uint64_t>(lr.weight_bytes());
    std::fprintf(stderr, "coordinator: rank %d loaded %.2f MiB of weights (planned %.2f MiB), %.2f MiB cache\n", r,
                 got / 1048576.0, planned / 1048576.0, lr.cache_bytes() / 1048576.0);
    if (cuda) {
      std::fprintf(stderr,
                   "coordinator: rank %d (%s) device memory: allocated %s (planned %s without the CUDA context and NCCL "
                   "estimates of %s), device used %s of %s, cap %s\n",
                   r, lr.device().c_str(), mib(lr.device_allocated_bytes()).c_str(),
                   mib(plans_[r].total_bytes() - std::min(plans_[r].total_bytes(), outside)).c_str(), mib(outside).c_str(),
                   mib(lr.device_used_bytes()).c_str(), mib(lr.device_total_bytes()).c_str(), mib(caps[r]).c_str());
    }
    // The plan prices what the worker allocates; a large difference means the plan is wrong.
    if (got > planned + planned / 20 + (1 << 20)) {
      return absl::InternalError(absl::StrCat("rank ", r, " allocated ", got, " bytes of weights, more than the ",
                                              planned, " planned"));
    }
  }

  SchedulerConfig sc;
  sc.num_pages = static_cast<int32_t>(popts.num_pages());
  sc.page_size = static_cast<int32_t>(options_.page_size);
  sc.max_batch = static_cast<int32_t>(options_.max_batch);
  sc.max_step_tokens = static_cast<int32_t>(step.tokens);
  sc.prefill_chunk = options_.prefill_chunk;
  sc.max_queue = options_.max_queue;
  sc.decode_steps = options_.decode_steps;
  if (draft_footprint_) {  // one draft-and-verify round per decode step
    sc.decode_steps = static_cast<int32_t>(decode_tokens_per_step());
    sc.speculative = true;
  }
  sc.prefix_cache = options_.prefix_cache;
  sc.pipeline = options_.step_pipeline && !sc.speculative;
  EXL3_RETURN_IF_ERROR(validate_scheduler_config(sc));
  loop_ = std::make_unique<ServingLoop>(*tokenizer_, group_, sc, options_.step_timeout,
                                        [this](const absl::Status& s) { on_group_failure(s); });
  loop_->start();

  const ModelConfig& c = footprint_.config;
  ModelLimits limits;
  limits.vocab_size = static_cast<int32_t>(c.vocab_size);
  limits.max_context = static_cast<int32_t>(options_.max_seq_len);
  for (int32_t id : tokenizer_->eos_ids()) limits.eos_token_ids.push_back(id);
  for (int32_t id : c.eos_token_ids) {
    if (std::find(limits.eos_token_ids.begin(), limits.eos_token_ids.end(), id) == limits.eos_token_ids.end()) {
      limits.eos_token_ids.push_back(id);
    }
  }
  v1::ModelInfoResponse info;
  info.set_architecture(c.architecture_name);
  info.set_num_layers(static_cast<int32_t>(c.num_layers));
  info.set_vocab_size(static_cast<int32_t>(c.vocab_size));
  info.set_hidden_size(static_cast<int32_t>(c.hidden_size));
  info.set_bits_per_weight(footprint_.decoder_bits > 0 ? footprint_.decoder_bits : 16.0);
  info.set_max_context(static_cast<int32_t>(options_.max_seq_len));
  info.set_split_mode(plan_mode_name(options_.mode));
  info.set_model_dir(options_.model_dir);
  info.set_cache_k_bits(options_.cache_bits.k);
  info.set_cache_v_bits(options_.cache_bits.v);
  if (draft_footprint_) {
    info.set_draft_model_dir(options_.draft_model_dir);
    info.set_draft_tokens(options_.draft_tokens);
  }
  if (tokenizer_->bos_id()) info.set_bos_token_id(*tokenizer_->bos_id());
  for (int32_t id : limits.eos_token_ids) info.add_eos_token_ids(id);
  const auto regs = group_->registrations();
  const int64_t group = c.num_heads / c.num_kv_heads;
  for (int r = 0; r < options_.world_size; ++r) {
    const RankPlan& p = plans_[r];
    v1::RankShard* s = info.add_shards();
    s->set_rank(r);
    s->set_device(absl::StrCat(regs[r].device().name(), " on ", regs[r].hostname()));
    if (cuda) {
      absl::StrAppend(s->mutable_device(), "; loaded: allocated ", format_bytes(loaded_[r].device_allocated_bytes()),
                      ", device used ", format_bytes(loaded_[r].device_used_bytes()), " of ",
                      format_bytes(loaded_[r].device_total_bytes()));
    }
    s->set_first_layer(static_cast<int32_t>(p.first_layer));
    s->set_end_layer(static_cast<int32_t>(p.end_layer));
    int64_t kv = 0, mlp = 0;
    for (const LayerPlan& l : p.layers) {
      kv += l.kv_head_end - l.kv_head_begin;
      mlp += l.mlp_end - l.mlp_begin;
    }
    s->set_kv_heads(kv);
    s->set_attention_heads(kv * group);
    s->set_mlp_columns(mlp);
    s->set_vocab_rows(p.vocab_end - p.vocab_begin);
    s->set_weight_bytes(static_cast<int64_t>(p.weight_bytes));
    s->set_cache_bytes(static_cast<int64_t>(p.cache_bytes));
    s->set_workspace_bytes(static_cast<int64_t>(p.workspace_bytes));  // CUDA: with scratch, context, NCCL
    s->set_cap_bytes(static_cast<int64_t>(caps[r]));
  }
  inference_service_ = std::make_unique<InferenceService>(
      *tokenizer_, *loop_, limits, options_.request_limits, options_.security.auth_token, info,
      [this](v1::StatsResponse* r) { fill_worker_stats(r); });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(options_.host, ":", options_.port), public_api_credentials(options_.security),
                           &public_port_);
  builder.RegisterService(inference_service_.get());
  disable_port_sharing(builder);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_request_message_bytes(options_.request_limits)));
  public_server_ = builder.BuildAndStart();
  if (!public_server_ || public_port_ == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", options_.host, ":", options_.port,
                                               " for the public API (--port): the port is in use or the address is "
                                               "not this host's",
                                               options_.security.tls() ? ", or --tls-cert and --tls-key do not match" : ""));
  }
  public_server_->GetHealthCheckService()->SetServingStatus(true);
  return absl::OkStatus();
}

// From the serving loop's last memory reports (refreshed between steps): Stats never waits behind
// a step or adds a call of its own to the workers.
void Coordinator::fill_worker_stats(v1::StatsResponse* response) {
  const ServingLoop::WorkerMemory memory = loop_->worker_memory();
  const auto regs = group_->registrations();
  for (int r = 0; r < options_.world_size; ++r) {
    v1::WorkerStats* w = response->add_workers();
    w->set_rank(r);
    w->set_device(regs[r].device().name());
    if (r < static_cast<int>(memory.reports.size())) {
      const pb::MemoryReport& m = memory.reports[static_cast<size_t>(r)];
      w->set_weight_bytes(m.weight_bytes());
      w->set_cache_bytes(m.cache_bytes());
      w->set_memory_used_bytes(m.memory_used_bytes());
      if (m.device_total_bytes() > 0 && r < static_cast<int>(plans_.size())) {
        absl::StrAppend(w->mutable_device(), " (planned ", format_bytes(plans_[r].total_bytes()), " of ",
                        format_bytes(r < static_cast<int>(caps_.size()) ? caps_[r] : 0), " cap; allocated ",
                        format_bytes(m.device_allocated_bytes()), ", device used ",
                        format_bytes(m.memory_used_bytes()), " of ", format_bytes(m.device_total_bytes()), ")");
      }
    }
  }
}

void Coordinator::on_group_failure(const absl::Status& status) {
  std::lock_guard lock(mu_);
  if (failure_.ok()) failure_ = status;
  if (public_server_) public_server_->GetHealthCheckService()->SetServingStatus(false);
  cv_.notify_all();
}

absl::Status Coordinator::wait() {
  std::unique_lock lock(mu_);
  while (!stop_requested_ && failure_.ok()) {
    cv_.wait_for(lock, std::chrono::milliseconds(200));
    // A worker lost while idle shows up in the group before any step notices it.
    const absl::Status group_failure = group_ ? group_->failure() : absl::OkStatus();
    if (!group_failure.ok() && failure_.ok()) {
      lock.unlock();
      if (loop_) loop_->drain_and_stop(std::chrono::milliseconds(0));
      lock.lock();
      failure_ = group_failure;
    }
  }
  return failure_;
}

absl::Status Coordinator::failure() {
  {
    std::lock_guard lock(mu_);
    if (!failure_.ok()) return failure_;
  }
  return group_ ? group_->failure() : absl::OkStatus();
}

void Coordinator::request_stop() {
  std::lock_guard lock(mu_);
  stop_requested_ = true;
  cv_.notify_all();
}

void Coordinator::shutdown(std::chrono::milliseconds drain_timeout) {
  {
    std::lock_guard lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (public_server_) public_server_->GetHealthCheckService()->SetServingStatus(false);
  if (loop_) loop_->drain_and_stop(drain_timeout);
  if (group_) group_->shutdown("coordinator shutting down", std::chrono::milliseconds(5000));
  control_service_.close_store();
  const auto deadline = std::chrono::system_clock::now() + std::chrono::seconds(2);
  if (public_server_) public_server_->Shutdown(deadline);
  if (control_server_) control_server_->Shutdown(deadline);
}

}  // namespace exl3
