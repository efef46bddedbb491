// Conversions between control-plane messages and worker values.
#include "worker/service/proto_convert.h"

namespace exl3 {

ModelShard shard_from_proto(const control::v1::ShardPlan& plan) {
  ModelShard s;
  s.mode = plan.mode() == "layers" ? ShardMode::kLayers : ShardMode::kTensorParallel;
  s.rank = plan.rank();
  s.world_size = plan.world_size();
  s.first_layer = plan.first_layer();
  s.end_layer = plan.end_layer();
  for (const auto& l : plan.layers()) s.layers.push_back({l.kv_head_begin(), l.kv_head_end(), l.mlp_begin(), l.mlp_end()});
  s.vocab_begin = plan.vocab_begin();
  s.vocab_end = plan.vocab_end();
  s.has_embedding = plan.has_embedding();
  s.has_head = plan.has_head();
  return s;
}

SamplingParams sampling_from_proto(const control::v1::Sampling& p) {
  SamplingParams s;
  s.temperature = p.temperature();
  s.top_k = p.top_k();
  s.top_p = p.top_p();
  s.min_p = p.min_p();
  s.repetition_penalty = p.repetition_penalty();
  s.presence_penalty = p.presence_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.seed = p.seed();
  for (const auto& b : p.logit_bias()) s.logit_bias.push_back({b.id(), b.bias()});
  s.banned_ids.assign(p.banned_ids().begin(), p.banned_ids().end());
  s.dry_multiplier = p.dry_multiplier();
  s.dry_base = p.dry_base();
  s.dry_allowed_length = p.dry_allowed_length();
  s.dry_range = p.dry_range();
  s.dry_breakers.assign(p.dry_breakers().begin(), p.dry_breakers().end());
  s.typical_p = p.typical_p();
  s.xtc_threshold = p.xtc_threshold();
  s.xtc_probability = p.xtc_probability();
  s.temperature_last = p.temperature_last();
  s.logprobs = p.logprobs();
  return s;
}

control::v1::Sampling sampling_to_proto(const SamplingParams& s) {
  control::v1::Sampling p;
  p.set_temperature(s.temperature);
  p.set_top_k(s.top_k);
  p.set_top_p(s.top_p);
  p.set_min_p(s.min_p);
  p.set_repetition_penalty(s.repetition_penalty);
  p.set_presence_penalty(s.presence_penalty);
  p.set_frequency_penalty(s.frequency_penalty);
  p.set_seed(s.seed);
  for (const TokenBias& b : s.logit_bias) {
    control::v1::TokenBias* out = p.add_logit_bias();
    out->set_id(b.id);
    out->set_bias(b.bias);
  }
  p.mutable_banned_ids()->Add(s.banned_ids.begin(), s.banned_ids.end());
  p.set_dry_multiplier(s.dry_multiplier);
  p.set_dry_base(s.dry_base);
  p.set_dry_allowed_length(s.dry_allowed_length);
  p.set_dry_range(s.dry_range);
  p.mutable_dry_breakers()->Add(s.dry_breakers.begin(), s.dry_breakers.end());
  p.set_typical_p(s.typical_p);
  p.set_xtc_threshold(s.xtc_threshold);
  p.set_xtc_probability(s.xtc_probability);
  p.set_temperature_last(s.temperature_last);
  p.set_logprobs(s.logprobs);
  return p;
}

StepInput step_from_proto(const control::v1::Step& step) {
  StepInput in;
  in.decode_steps = step.decode_steps();
  in.speculative = step.speculative();
  for (const auto& s : step.sequences()) {
    StepSequence q;
    q.seq_id = s.seq_id();
    q.tokens.assign(s.tokens().begin(), s.tokens().end());
    q.from_last_sample = s.from_last_sample();
    q.start_pos = s.start_pos();
    q.page_table.assign(s.page_table().begin(), s.page_table().end());
    q.sample = s.sample();
    q.sampling = sampling_from_proto(s.sampling());
    q.prompt_len = s.prompt_len();
    q.return_logits = s.return_logits();
    q.history_prefix.assign(s.history_prefix().begin(), s.history_prefix().end());
    q.banned_now.assign(s.banned_now().begin(), s.banned_now().end());
    in.sequences.push_back(std::move(q));
  }
  for (const auto& c : step.page_copies()) in.page_copies.push_back({c.src(), c.dst()});
  return in;
}

void logprobs_to_proto(const std::vector<TokenLogprobs>& logprobs, control::v1::SequenceTokens* out) {
  for (const TokenLogprobs& lp : logprobs) {
    control::v1::TokenLogprob* t = out->add_logprobs();
    t->set_logprob(lp.logprob);
    for (const TokenAlternative& a : lp.top) {
      t->add_top_ids(a.id);
      t->add_top_logprobs(a.logprob);
    }
  }
}

std::vector<TokenLogprobs> logprobs_from_proto(const control::v1::SequenceTokens& tokens) {
  std::vector<TokenLogprobs> out;
  for (const auto& t : tokens.logprobs()) {
    TokenLogprobs lp;
    lp.logprob = t.logprob();
    for (int j = 0; j < t.top_ids_size() && j < t.top_logprobs_size(); ++j) {
      lp.top.push_back({t.top_ids(j), t.top_logprobs(j)});
    }
    out.push_back(std::move(lp));
  }
  return out;
}

}  // namespace exl3
