// Public API handlers.
#include "coordinator/server/inference_service.h"

#include "absl/strings/str_cat.h"
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

GenerateParams params_from_proto(const v1::GenerateRequest& r) {
  GenerateParams p;
  p.request_id = r.request_id();
  if (r.input_case() == v1::GenerateRequest::kPrompt) {
    p.prompt = r.prompt();
  } else if (r.input_case() == v1::GenerateRequest::kPromptTokens) {
    p.prompt = std::vector<int32_t>(r.prompt_tokens().ids().begin(), r.prompt_tokens().ids().end());
  }
  if (r.has_add_bos()) p.add_bos = r.add_bos();
  p.special_tokens_as_text = r.special_tokens_as_text();
  const v1::SamplingParams& s = r.sampling();
  if (s.has_temperature()) p.sampling.temperature = s.temperature();
  if (s.has_top_k()) p.sampling.top_k = s.top_k();
  if (s.has_top_p()) p.sampling.top_p = s.top_p();
  if (s.has_min_p()) p.sampling.min_p = s.min_p();
  if (s.has_repetition_penalty()) p.sampling.repetition_penalty = s.repetition_penalty();
  if (s.has_presence_penalty()) p.sampling.presence_penalty = s.presence_penalty();
  if (s.has_frequency_penalty()) p.sampling.frequency_penalty = s.frequency_penalty();
  if (s.has_seed()) p.sampling.seed = s.seed();
  const v1::StoppingCriteria& st = r.stopping();
  if (st.has_max_new_tokens()) p.stopping.max_new_tokens = st.max_new_tokens();
  p.stopping.stop_strings.assign(st.stop_strings().begin(), st.stop_strings().end());
  p.stopping.stop_token_ids.assign(st.stop_token_ids().begin(), st.stop_token_ids().end());
  p.stopping.ignore_eos = st.ignore_eos();
  p.skip_special_tokens = r.skip_special_tokens();
  return p;
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
  if (absl::Status size = check_request_size(request, request_limits_); !size.ok()) return to_grpc(size);
  // Held until the call returns: counts the call while it is tokenized, queued and running.
  absl::StatusOr<InFlightRequests::Slot> slot = in_flight_.acquire(context->peer());
  if (!slot.ok()) return to_grpc(slot.status());
  GenerateParams params = params_from_proto(request);
  if (params.request_id.empty()) params.request_id = absl::StrCat("req-", next_request_id_++);
  // The prompt as token ids: text is tokenized (BOS per add_bos, default the tokenizer's); token
  // prompts are used as given unless add_bos is set explicitly. An empty prompt stays empty so
  // that validation refuses it, BOS or not.
  std::vector<int32_t> body;
  bool default_bos = false;
  if (const auto* text = std::get_if<std::string>(&params.prompt)) {
    body = tokenizer_.encode(*text, !params.special_tokens_as_text);
    default_bos = tokenizer_.add_bos();
  } else if (const auto* ids = std::get_if<std::vector<int32_t>>(&params.prompt)) {
    body = *ids;
  }
  std::vector<int32_t> prompt_ids;
  prompt_ids.reserve(body.size() + 1);
  if (!body.empty() && params.add_bos.value_or(default_bos) && tokenizer_.bos_id()) {
    prompt_ids.push_back(*tokenizer_.bos_id());
  }
  prompt_ids.insert(prompt_ids.end(), body.begin(), body.end());
  const char* prompt_field = std::holds_alternative<std::string>(params.prompt) ? "prompt" : "prompt_tokens";
  if (absl::Status n = check_prompt_tokens(static_cast<int64_t>(prompt_ids.size()), prompt_field, request_limits_);
      !n.ok()) {
    return to_grpc(n);
  }
  // Unset max_new_tokens means "up to the context"; a lower --max-new-tokens caps that default
  // (the request then finishes with LENGTH at the cap).
  const int64_t room = static_cast<int64_t>(limits_.max_context) - static_cast<int64_t>(prompt_ids.size());
  if (!params.stopping.max_new_tokens && request_limits_.max_new_tokens < room) {
    params.stopping.max_new_tokens = request_limits_.max_new_tokens;
  }
  absl::StatusOr<ValidatedRequest> validated = validate_request(params, limits_, prompt_ids, random_seed());
  if (!validated.ok()) return to_grpc(validated.status());
  absl::StatusOr<ServingLoop::Submitted> submitted = loop_.submit(*std::move(validated));
  if (!submitted.ok()) return to_grpc(submitted.status());

  v1::GenerateResponse aggregate;
  aggregate.set_request_id(params.request_id);
  while (true) {
    std::optional<GenerationChunk> chunk = submitted->channel->take(std::chrono::milliseconds(50));
    if (context->IsCancelled()) {
      loop_.cancel(submitted->id);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client cancelled the request or its deadline passed");
    }
    if (!chunk) continue;
    if (!chunk->error.ok()) return to_grpc(chunk->error);
    v1::GenerateResponse out;
    out.set_request_id(params.request_id);
    out.set_text(chunk->text);
    out.mutable_token_ids()->Add(chunk->tokens.begin(), chunk->tokens.end());
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
  response->set_free_kv_pages(s.free_pages);
  response->set_total_kv_pages(s.total_pages);
  response->set_uptime_s(t.uptime_s);
  if (stats_extra_) stats_extra_(response);
  return grpc::Status::OK;
}

}  // namespace exl3
