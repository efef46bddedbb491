// Public API handlers.
#include "coordinator/server/inference_service.h"

#include "absl/strings/str_cat.h"
#include "coordinator/server/request_admission.h"
#include "coordinator/server/server_credentials.h"

namespace exl3 {
namespace {

v1::FinishReason finish_to_proto(FinishReason r) {
  switch (r) {
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kEos: return v1::FINISH_REASON_EOS;
    case FinishReason::kStopString: return v1::FINISH_REASON_STOP_STRING;
    case FinishReason::kStopToken: return v1::FINISH_REASON_STOP_TOKEN;
    case FinishReason::kContext: return v1::FINISH_REASON_CONTEXT;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace

grpc::Status to_grpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

InferenceService::InferenceService(const Tokenizer& tokenizer, ServingLoop& loop, ModelLimits limits,
                                   RequestLimits request_limits, std::string auth_token, v1::ModelInfoResponse info,
                                   std::function<void(v1::StatsResponse*)> stats_extra)
    : tokenizer_(tokenizer), loop_(loop), limits_(std::move(limits)), request_limits_(request_limits),
      auth_token_(std::move(auth_token)),
      in_flight_(request_limits.max_requests, request_limits.max_requests_per_connection), info_(std::move(info)),
      stats_extra_(std::move(stats_extra)) {}

uint64_t InferenceService::random_seed() {
  std::lock_guard lock(seed_mu_);
  return seed_rng_();
}

grpc::Status InferenceService::run(grpc::ServerContext* context, const v1::GenerateRequest& request,
                                   const std::function<bool(const v1::GenerateResponse&)>& emit, bool stream) {
  if (grpc::Status auth = check_bearer_token(*context, auth_token_); !auth.ok()) return auth;
  // An oversized request is refused before it takes a slot (admit_request checks again).
  if (absl::Status size = check_request_size(request, request_limits_); !size.ok()) return to_grpc(size);
  // Held until the call returns: counts the call while it is tokenized, queued and running.
  absl::StatusOr<InFlightRequests::Slot> slot = in_flight_.acquire(context->peer());
  if (!slot.ok()) return to_grpc(slot.status());
  absl::StatusOr<ValidatedRequest> validated = admit_request(request, tokenizer_, limits_, request_limits_,
                                                             absl::StrCat("req-", next_request_id_++), random_seed());
  if (!validated.ok()) return to_grpc(validated.status());
  const std::string request_id = validated->request_id;
  absl::StatusOr<ServingLoop::Submitted> submitted = loop_.submit(*std::move(validated));
  if (!submitted.ok()) return to_grpc(submitted.status());

  v1::GenerateResponse aggregate;
  aggregate.set_request_id(request_id);
  while (true) {
    std::optional<GenerationChunk> chunk = submitted->channel->take(std::chrono::milliseconds(50));
    if (context->IsCancelled()) {
      loop_.cancel(submitted->id);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request or its deadline passed");
    }
    if (!chunk) continue;
    if (!chunk->error.ok()) return to_grpc(chunk->error);
    v1::GenerateResponse out;
    out.set_request_id(request_id);
    out.set_text(chunk->text);
    out.mutable_token_ids()->Add(chunk->tokens.begin(), chunk->tokens.end());
    if (chunk->logprobs.size() == chunk->tokens.size()) {
      for (size_t i = 0; i < chunk->tokens.size(); ++i) {
        v1::TokenLogprobs* lp = out.add_logprobs();
        lp->set_token_id(chunk->tokens[i]);
        lp->set_logprob(chunk->logprobs[i].logprob);
        for (const TokenAlternative& a : chunk->logprobs[i].top) {
          v1::TokenAlternative* alt = lp->add_top();
          alt->set_token_id(a.id);
          alt->set_logprob(a.logprob);
        }
      }
    }
    if (chunk->done) {
      out.set_finish_reason(finish_to_proto(*chunk->finish));
      v1::Usage* u = out.mutable_usage();
      u->set_prompt_tokens(chunk->usage.prompt_tokens);
      u->set_completion_tokens(chunk->usage.completion_tokens);
      u->set_time_to_first_token_s(chunk->usage.time_to_first_token_s);
      u->set_decode_tokens_per_s(chunk->usage.decode_tokens_per_s);
      u->set_total_time_s(chunk->usage.total_time_s);
    }
    if (stream) {
      if ((!out.text().empty() || out.token_ids_size() > 0 || chunk->done) && !emit(out)) {
        loop_.cancel(submitted->id);
        return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
      }
    } else {
      aggregate.mutable_text()->append(out.text());
      aggregate.mutable_token_ids()->MergeFrom(out.token_ids());
      aggregate.mutable_logprobs()->MergeFrom(out.logprobs());
      if (chunk->done) {
        aggregate.set_finish_reason(out.finish_reason());
        *aggregate.mutable_usage() = out.usage();
        emit(aggregate);
      }
    }
    if (chunk->done) return grpc::Status::OK;
  }
}

grpc::Status InferenceService::Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                                        grpc::ServerWriter<v1::GenerateResponse>* writer) {
  return run(context, *request, [&](const v1::GenerateResponse& r) { return writer->Write(r); }, true);
}

grpc::Status InferenceService::GenerateUnary(grpc::ServerContext* context, const v1::GenerateRequest* request,
                                             v1::GenerateResponse* response) {
  return run(context, *request, [&](const v1::GenerateResponse& r) { *response = r; return true; }, false);
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* context, const v1::TokenizeRequest* request,
                                        v1::TokenizeResponse* response) {
  if (grpc::Status auth = check_bearer_token(*context, auth_token_); !auth.ok()) return auth;
  if (absl::Status size = check_tokenize_size(*request, request_limits_); !size.ok()) return to_grpc(size);
  if (request->has_add_bos() ? request->add_bos() : tokenizer_.add_bos()) {
    if (tokenizer_.bos_id()) response->add_ids(*tokenizer_.bos_id());
  }
  const std::vector<int32_t> ids = tokenizer_.encode(request->text(), !request->special_tokens_as_text());
  response->mutable_ids()->Add(ids.begin(), ids.end());
  return grpc::Status::OK;
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext* context, const v1::DetokenizeRequest* request,
                                          v1::DetokenizeResponse* response) {
  if (grpc::Status auth = check_bearer_token(*context, auth_token_); !auth.ok()) return auth;
  for (int i = 0; i < request->ids_size(); ++i) {
    const int32_t id = request->ids(i);
    if (id < 0 || id >= limits_.vocab_size || !tokenizer_.has_token(id)) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          absl::StrCat("ids[", i, "] = ", id, " is not a token id (vocabulary [0, ", limits_.vocab_size, "))"));
    }
  }
  const std::vector<int32_t> ids(request->ids().begin(), request->ids().end());
  response->set_text(tokenizer_.decode(ids, request->skip_special_tokens()));
  return grpc::Status::OK;
}

grpc::Status InferenceService::ModelInfo(grpc::ServerContext* context, const v1::ModelInfoRequest*,
                                         v1::ModelInfoResponse* response) {
  if (grpc::Status auth = check_bearer_token(*context, auth_token_); !auth.ok()) return auth;
  *response = info_;
  return grpc::Status::OK;
}

grpc::Status InferenceService::Stats(grpc::ServerContext* context, const v1::StatsRequest*,
                                     v1::StatsResponse* response) {
  if (grpc::Status auth = check_bearer_token(*context, auth_token_); !auth.ok()) return auth;
  const ServingTotals t = loop_.totals();
  const SchedulerStats& s = t.scheduler;
  response->set_queued_requests(s.queued);
  response->set_running_requests(s.running);
  response->set_completed_requests(s.completed);
  response->set_steps(s.steps);
  response->mutable_batch_size_counts()->Add(s.batch_size_counts.begin(), s.batch_size_counts.end());
  response->set_largest_batch(s.largest_batch);
  response->set_prompt_tokens(s.prompt_tokens);
  response->set_generated_tokens(s.generated_tokens);
  response->set_recent_tokens_per_s(t.recent_tokens_per_s);
  response->set_mean_tokens_per_s(t.mean_tokens_per_s);
  response->set_free_kv_pages(s.free_pages + s.cached_pages);  // cached pages are evicted on demand
  response->set_total_kv_pages(s.total_pages);
  response->set_uptime_s(t.uptime_s);
  response->set_prompt_tokens_computed(s.prompt_tokens_computed);
  response->set_prompt_tokens_reused(s.prompt_tokens_reused);
  const int64_t run = s.prompt_tokens_computed + s.prompt_tokens_reused;
  response->set_prefix_cache_hit_rate(run > 0 ? static_cast<double>(s.prompt_tokens_reused) / run : 0.0);
  response->set_shared_kv_pages(s.shared_pages);
  response->set_cached_kv_pages(s.cached_pages);
  response->set_speculative_rounds(t.speculation.rounds);
  response->set_draft_tokens_proposed(t.speculation.proposed);
  response->set_draft_tokens_accepted(t.speculation.accepted);
  if (stats_extra_) stats_extra_(response);
  return grpc::Status::OK;
}

}  // namespace exl3
