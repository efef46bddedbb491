// Conversions between control-plane messages (worker.proto) and the worker's own values.
#pragma once

#include <vector>

#include "proto/worker.pb.h"
#include "worker/engine.h"
#include "worker/model/model_shard.h"

namespace exl3 {

ModelShard shard_from_proto(const control::v1::ShardPlan& plan);
StepInput step_from_proto(const control::v1::Step& step);
control::v1::Sampling sampling_to_proto(const SamplingParams& p);
SamplingParams sampling_from_proto(const control::v1::Sampling& p);
// SequenceTokens.logprobs, one entry per token.
void logprobs_to_proto(const std::vector<TokenLogprobs>& logprobs, control::v1::SequenceTokens* out);
std::vector<TokenLogprobs> logprobs_from_proto(const control::v1::SequenceTokens& tokens);

}  // namespace exl3
