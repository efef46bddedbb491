// Sharded logits through real worker processes, shared by the CPU (Gloo) and multi-GPU (NCCL)
// tests and smollm2_tp_test: an in-test coordinator (the real Control service and WorkerGroup on
// loopback gRPC) plans the shards with the real planner, spawns exl3-worker processes that load only
// their shard, and asks for the logits of some prompts (cluster_logits, any model). For the fixture
// sequences they must match ExLlamaV3's and the same backend in one process; each rank's loaded
// weight bytes must equal its planned share.
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/test_paths.h"
#include "coordinator/planner/byte_units.h"
#include "coordinator/planner/model_footprint.h"
#include "coordinator/planner/shard_planner.h"
#include "coordinator/server/control_service.h"
#include "coordinator/server/plan_proto.h"
#include "gtest/gtest.h"
#include "launch/process/process_group.h"
#include "nlohmann/json.hpp"
#include "worker/loader/safetensors.h"
#include "worker/model/sequence_forward.h"

namespace exl3 {

struct ClusterCase {
  const char* name;
  PlanMode mode;
  std::vector<double> caps_gib;
  // Every worker loads its own copy of the model (exl3-worker --model, as on another host) while
  // the coordinator sends a path that does not exist.
  bool own_copies = false;
  // LoadShard.all_reduce and .all_reduce_oneshot_max_kib (empty / 0: the workers' defaults).
  const char* all_reduce = "";
  int32_t all_reduce_oneshot_max_kib = 0;
};

// A copy of the model directory for one worker: a directory of symlinks to the model's files.
inline std::string model_copy(const std::string& model_dir, const std::string& name) {
  const std::filesystem::path copy = testing::work_path("model-copies/" + name);
  std::filesystem::remove_all(copy);
  std::filesystem::create_directories(copy);
  for (const auto& entry : std::filesystem::directory_iterator(model_dir)) {
    std::filesystem::create_symlink(entry.path(), copy / entry.path().filename());
  }
  return copy.string();
}

// How the workers of a cluster run: CPU workers with Gloo, or one CUDA worker per GPU with NCCL
// (rank r sees only GPU r). Fidelity bounds of the two differ (fp32 vs fp16 activations).
struct ClusterBackend {
  BackendKind kind = BackendKind::kCpu;
  double max_kl_vs_reference = 3.5e-5;  // vs ExLlamaV3
  double max_kl_vs_single = 1.5e-11;    // vs the same backend in one process
  // Logits of one fixture sequence from the same backend in one process.
  std::function<Tensor(const std::vector<int32_t>&)> single;
};

inline std::vector<std::vector<int32_t>> fixture_sequences() {
  std::ifstream in(testing::test_data("reference/token_ids.json"));
  return nlohmann::json::parse(in)["input_ids"].get<std::vector<std::vector<int32_t>>>();
}

inline Tensor reference_logits(int64_t seq) {
  auto file = SafetensorsFile::open(testing::test_data("reference/exl3_4.0bpw.safetensors"));
  EXL3_CHECK_OK(file.status());
  const Tensor all = *(*file)->get("logits");
  const int64_t len = all.dim(1), vocab = all.dim(2);
  Tensor out = Tensor::zeros(DType::kF32, {len, vocab});
  std::copy_n(all.data<float>() + seq * len * vocab, len * vocab, out.mutable_data<float>());
  return out;
}

// How one cluster runs beyond its case: the model, the workers' backend and the collectives'
// timeout, and how many prompts go in one step (0: all of them in one step).
struct ClusterRun {
  std::string model_dir;
  BackendKind kind = BackendKind::kCpu;
  int32_t collective_timeout_ms = 30000;
  size_t prompts_per_step = 0;
};

// Plans the shards of `c` with the real planner, spawns exl3-worker processes on the real control
// plane (loopback gRPC), loads their shards, checks each rank's loaded weight bytes against its
// plan, and returns every position's logits of each prompt in `out`; checks that every rank
// returning logits agrees exactly and that the workers exit 0 when shut down.
inline void cluster_logits(const ClusterCase& c, const ClusterRun& run,
                           const std::vector<std::vector<int32_t>>& prompts, std::vector<Tensor>* out) {
  const bool cuda = run.kind == BackendKind::kCuda;
  const std::string& model_dir = run.model_dir;
  const int world = static_cast<int>(c.caps_gib.size());

  auto config = load_model_config(model_dir);
  ASSERT_TRUE(config.ok()) << config.status();
  auto tensors = SafetensorsCollection::open_dir(model_dir);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  auto footprint = build_model_footprint(*config, run.kind, &*tensors);
  ASSERT_TRUE(footprint.ok()) << footprint.status();
  PlannerOptions popts;
  popts.mode = c.mode;
  for (double g : c.caps_gib) popts.caps.push_back(gib_to_bytes(g));
  popts.max_seq_len = 256;
  popts.max_batch = 4;
  popts.page_size = 64;
  auto plans = plan_shards(*footprint, popts);
  ASSERT_TRUE(plans.ok()) << plans.status();

  // The real control plane on an ephemeral loopback port.
  ControlService control;
  auto group = std::make_shared<WorkerGroup>(world, std::string("test-") + c.name);
  control.set_group(group);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&control);
  builder.SetMaxReceiveMessageSize(64 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);

  std::vector<ProcessSpec> specs;
  for (int r = 0; r < world; ++r) {
    ProcessSpec s;
    s.argv = {std::string(EXL3_BIN_DIR) + "/exl3-worker", "--coordinator", "127.0.0.1:" + std::to_string(port),
              "--rank", std::to_string(r), "--world", std::to_string(world), "--connect-timeout", "30",
              "--backend", cuda ? "cuda" : "cpu"};
    if (c.own_copies) {
      s.argv.push_back("--model");
      s.argv.push_back(model_copy(model_dir, absl::StrCat(c.name, "-rank", r)));
    }
    s.env = {{"OPENBLAS_NUM_THREADS", "1"}};
    if (cuda) s.env.push_back({"CUDA_VISIBLE_DEVICES", std::to_string(r)});
    specs.push_back(std::move(s));
  }
  auto workers = ProcessGroup::spawn(std::move(specs));
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_TRUE(group->wait_ready(std::chrono::seconds(60)).ok()) << group->failure();

  std::vector<pb::Command> loads(world);
  for (int r = 0; r < world; ++r) {
    pb::LoadShard* l = loads[r].mutable_load();
    l->set_model_dir(c.own_copies ? "/nonexistent/coordinator-model-path" : model_dir);
    *l->mutable_plan() = plan_to_proto((*plans)[r]);
    l->set_num_pages(static_cast<int32_t>(popts.num_pages()));
    l->set_page_size(static_cast<int32_t>(popts.page_size));
    l->set_comm_backend(cuda ? "nccl" : "gloo");
    l->set_store_prefix(std::string("test-") + c.name);
    l->set_collective_timeout_ms(run.collective_timeout_ms);
    l->set_comm_host("127.0.0.1");
    l->set_all_reduce(c.all_reduce);
    l->set_all_reduce_oneshot_max_kib(c.all_reduce_oneshot_max_kib);
  }
  auto loaded = group->call(loads, std::chrono::seconds(120));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  uint64_t whole = footprint->total_weight_bytes();
  for (int r = 0; r < world; ++r) {
    const uint64_t got = static_cast<uint64_t>((*loaded)[r].load().weight_bytes());
    std::printf("%s rank %d: loaded %llu bytes of weights, planned %llu (whole model %llu)\n", c.name, r,
                static_cast<unsigned long long>(got), static_cast<unsigned long long>((*plans)[r].weight_bytes),
                static_cast<unsigned long long>(whole));
    EXPECT_EQ(got, (*plans)[r].weight_bytes) << "rank " << r;
    if (world > 1) {
      EXPECT_LT(got, whole) << "rank " << r << " holds the whole model";
    }
    if (c.caps_gib[r] > 0.1) {
      EXPECT_GT(got, 0u) << "rank " << r << " holds nothing";
    }
  }

  // The prompts in steps of `prompts_per_step`, logits of every position; each sequence's pages
  // follow the previous sequence's in its step.
  out->clear();
  const size_t per_step = run.prompts_per_step > 0 ? run.prompts_per_step : prompts.size();
  for (size_t first = 0; first < prompts.size(); first += per_step) {
    const size_t end = std::min(prompts.size(), first + per_step);
    pb::Command step;
    step.mutable_step()->set_step_id(static_cast<int64_t>(first / per_step) + 1);
    step.mutable_step()->set_decode_steps(1);
    int64_t next_page = 0;
    for (size_t i = first; i < end; ++i) {
      const auto& ids = prompts[i];
      const int64_t pages = (static_cast<int64_t>(ids.size()) + popts.page_size - 1) / popts.page_size;
      ASSERT_LE(next_page + pages, static_cast<int64_t>(popts.num_pages()));
      pb::SequenceStep* s = step.mutable_step()->add_sequences();
      s->set_seq_id(100 + i);
      s->mutable_tokens()->Add(ids.begin(), ids.end());
      s->set_start_pos(0);
      for (int64_t p = 0; p < pages; ++p) s->add_page_table(static_cast<int32_t>(next_page++));
      s->set_sample(false);
      s->set_prompt_len(static_cast<int32_t>(ids.size()));
      s->set_return_logits(true);
    }
    auto results = group->call_all(step, std::chrono::seconds(120));
    ASSERT_TRUE(results.ok()) << results.status();
    for (size_t i = first; i < end; ++i) {
      // Logits come from the rank(s) computing the head; all of them must agree exactly.
      std::optional<Tensor> logits;
      for (int r = 0; r < world; ++r) {
        for (const pb::SequenceLogits& l : (*results)[r].step().logits()) {
          if (l.seq_id() != 100 + i) continue;
          Tensor t = Tensor::zeros(DType::kF32, {static_cast<int64_t>(l.values_size()) / l.vocab(), l.vocab()});
          std::copy(l.values().begin(), l.values().end(), t.mutable_data<float>());
          if (logits) {
            EXPECT_EQ(compare_logits(*logits, t).max_kl, 0.0) << "ranks disagree on sequence " << i;
          } else {
            logits = std::move(t);
          }
        }
      }
      ASSERT_TRUE(logits.has_value()) << "no rank returned logits for sequence " << i;
      ASSERT_EQ(logits->dim(0), static_cast<int64_t>(prompts[i].size()));
      out->push_back(std::move(*logits));
    }
  }

  // Workers told to shut down exit 0 on their own.
  group->shutdown("test done", std::chrono::seconds(5));
  const auto deadline = ProcessClock::now() + std::chrono::seconds(10);
  while ((*workers)->pending_count() > 0 && ProcessClock::now() < deadline) {
    auto exit = (*workers)->wait_any(deadline);
    ASSERT_TRUE(exit.ok()) << exit.status();
    if (exit->has_value()) {
      EXPECT_TRUE((*exit)->success()) << (*exit)->describe();
    }
  }
  EXPECT_EQ((*workers)->pending_count(), 0) << "workers still running 10 s after shutdown";
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
}

// Runs the fixture sequences (all in one step) through the fixture model sharded as `c`; checks
// the loaded bytes against the plan and the logits against ExLlamaV3 and the single-process model
// of the same backend.
inline void run_sharded_logits_case(const ClusterCase& c, const ClusterBackend& backend) {
  const auto seqs = fixture_sequences();
  std::vector<Tensor> logits;
  ASSERT_NO_FATAL_FAILURE(
      cluster_logits(c, ClusterRun{testing::source_path("models/exl3-4.0bpw"), backend.kind}, seqs, &logits));
  ASSERT_EQ(logits.size(), seqs.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    const LogitsComparison vs_ref = compare_logits(reference_logits(static_cast<int64_t>(i)), logits[i]);
    const LogitsComparison vs_single = compare_logits(backend.single(seqs[i]), logits[i]);
    std::printf("%s sequence %zu: vs ExLlamaV3 mean KL %.3g top-1 %.4f; vs single process mean KL %.3g max KL %.3g\n",
                c.name, i, vs_ref.mean_kl, vs_ref.top1_agreement, vs_single.mean_kl, vs_single.max_kl);
    EXPECT_LE(vs_ref.mean_kl, backend.max_kl_vs_reference);
    EXPECT_GE(vs_ref.top1_agreement, 0.99);
    EXPECT_LE(vs_single.mean_kl, backend.max_kl_vs_single);
  }
}

}  // namespace exl3
