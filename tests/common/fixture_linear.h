// Layer 0's EXL3 linears of the 4.0 bpw fixture model (models/exl3-4.0bpw, all MUL1 at K=4) with
// ExLlamaV3's dump of them (tests/data/reference/exl3_4.0bpw_linears.safetensors: x, y_forward,
// weight_reconstructed, ...), for the kernel tests that check against it.
#pragma once

#include <initializer_list>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "worker/loader/safetensors.h"

namespace exl3::testing {

struct FixtureLinear {
  Exl3Weight weight;                   // host tensors as stored
  std::map<std::string, Tensor> dump;  // the requested tensors of ExLlamaV3's dump, by name
};

// Loads model.layers.0.<proj> (e.g. "self_attn.q_proj") and the dump's layers.0.<proj>.<name> for
// every name. A missing file or tensor fails the calling test: call it under
// ASSERT_NO_FATAL_FAILURE.
inline void load_fixture_linear(const std::string& proj, std::initializer_list<const char*> dump_names,
                                FixtureLinear& out) {
  const std::string model_path = source_path("models/exl3-4.0bpw/model.safetensors");
  const std::string dump_path = test_data("reference/exl3_4.0bpw_linears.safetensors");
  EXL3_REQUIRE_FILE(model_path);
  EXL3_REQUIRE_FILE(dump_path);
  absl::StatusOr<SafetensorsCollection> model = SafetensorsCollection::open_file(model_path);
  absl::StatusOr<SafetensorsCollection> dump = SafetensorsCollection::open_file(dump_path);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(dump.ok()) << dump.status();
  const std::string prefix = "model.layers.0." + proj;
  absl::StatusOr<Tensor> trellis = model->get(prefix + ".trellis");
  absl::StatusOr<Tensor> suh = model->get(prefix + ".suh");
  absl::StatusOr<Tensor> svh = model->get(prefix + ".svh");
  for (const auto* t : {&trellis, &suh, &svh}) ASSERT_TRUE(t->ok()) << t->status();
  ASSERT_TRUE(model->has(prefix + ".mul1")) << prefix << " is not MUL1";
  out.weight.k = trellis->dim(0) * 16;
  out.weight.n = trellis->dim(1) * 16;
  out.weight.bits = static_cast<int>(trellis->dim(2) / 16);
  out.weight.codebook = Codebook::kMul1;
  out.weight.trellis = *trellis;
  out.weight.suh = *suh;
  out.weight.svh = *svh;
  for (const char* name : dump_names) {
    absl::StatusOr<Tensor> t = dump->get("layers.0." + proj + "." + name);
    ASSERT_TRUE(t.ok()) << t.status();
    out.dump[name] = *t;
  }
}

}  // namespace exl3::testing
