// Setup shared by the Engine tests (engine_test, engine_prefix_reuse_test, speculative_engine_test):
// the fixture prompts, the 4.0 bpw fixture model's directory, an engine with given options, and a
// greedy StepSequence.
#pragma once

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "nlohmann/json.hpp"
#include "worker/draft_model.h"
#include "worker/engine.h"

namespace exl3::testing {

// ExLlamaV3's four fixture token sequences (tests/data/reference/token_ids.json).
inline std::vector<std::vector<int32_t>> fixture_prompts() {
  std::ifstream in(test_data("reference/token_ids.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  return j["input_ids"].get<std::vector<std::vector<int32_t>>>();
}

inline std::string fixture_model_dir() { return source_path("models/exl3-4.0bpw"); }

// A single-rank engine with `options` on `model` (the fixture model on the CPU backend when null),
// drafting with `drafter` when given.
inline std::unique_ptr<Engine> make_engine(const EngineOptions& options, std::unique_ptr<LlamaModel> model = nullptr,
                                           std::unique_ptr<DraftModel> drafter = nullptr) {
  if (model == nullptr) {
    auto loaded = LlamaModel::load(fixture_model_dir());
    EXL3_CHECK_OK(loaded.status());
    model = *std::move(loaded);
  }
  auto engine = Engine::create(std::move(model), options, nullptr, std::move(drafter));
  EXL3_CHECK_OK(engine.status());
  return *std::move(engine);
}

}  // namespace exl3::testing
