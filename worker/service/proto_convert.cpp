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
  return p;
}

StepInput step_from_proto(const control::v1::Step& step) {
  StepInput in;
  in.decode_steps = step.decode_steps();
  for (const auto& s : step.sequences()) {
    StepSequence q;
    q.seq_id = s.seq_id();
    q.tokens.assign(s.tokens().begin(), s.tokens().end());
    q.start_pos = s.start_pos();
    q.page_table.assign(s.page_table().begin(), s.page_table().end());
    q.sample = s.sample();
    q.sampling = sampling_from_proto(s.sampling());
    q.prompt_len = s.prompt_len();
    q.return_logits = s.return_logits();
    in.sequences.push_back(std::move(q));
  }
  return in;
}

}  // namespace exl3
