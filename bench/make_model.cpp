// Writing a synthetic EXL3 model directory (see make_model.h): plan, shard, write the
// safetensors files in parallel, then the index and the JSON files (config.json last, so a
// directory whose writing failed never looks like a complete model).
#include "bench/make_model.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/synthetic_tokenizer.h"
#include "kernels/check.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

absl::Status write_json(const fs::path& path, const json& j) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path.string(), ": cannot open for writing"));
  out << j.dump(4) << "\n";
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path.string(), ": write failed"));
  return absl::OkStatus();
}

// Files this tool writes (tokenizer files included: a stale tokenizer_config.json could name
// tokens a newly copied tokenizer.json lacks).
constexpr const char* kTokenizerSideFiles[] = {"tokenizer_config.json", "special_tokens_map.json"};

bool is_model_file(const fs::path& p) {
  const std::string name = p.filename().string();
  if (p.extension() == ".safetensors") return true;
  for (const char* f : {"model.safetensors.index.json", "config.json", "quantization_config.json",
                        "generation_config.json", "tokenizer.json"}) {
    if (name == f) return true;
  }
  for (const char* f : kTokenizerSideFiles) {
    if (name == f) return true;
  }
  return false;
}

// "1.75 GiB" or "12.3 MiB": sizes of a progress line in one unit chosen by `scale_bytes`.
std::string format_size(uint64_t bytes, uint64_t scale_bytes) {
  if (scale_bytes >= (1ull << 30)) return absl::StrFormat("%.2f GiB", bytes / kGiB);
  return absl::StrFormat("%.1f MiB", bytes / (1024.0 * 1024.0));
}

// Creates `dir`; refuses one that already holds a model unless `overwrite`, which removes the
// old model files (stale shards would otherwise be loaded with the new ones).
absl::Status prepare_out_dir(const fs::path& dir, bool overwrite) {
  if (dir.empty()) return absl::InvalidArgumentError("--out: no output directory given");
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("--out: ", dir.string(), " exists and is not a directory"));
  }
  fs::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("--out: cannot create directory ", dir.string(), " (", ec.message(), ")"));
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (is_model_file(e.path())) old.push_back(e.path());
  }
  if (ec) return absl::PermissionDeniedError(absl::StrCat("--out: cannot list ", dir.string(), " (", ec.message(), ")"));
  if (!old.empty() && !overwrite) {
    return absl::AlreadyExistsError(absl::StrCat("--out: ", dir.string(), " already holds model files (",
                                                 old.front().filename().string(), "); pass --overwrite to replace them"));
  }
  for (const fs::path& p : old) {
    if (!fs::remove(p, ec) || ec) {
      return absl::PermissionDeniedError(absl::StrCat("--out: cannot remove ", p.string(), " (", ec.message(), ")"));
    }
  }
  // Fail now, not after minutes of writing, when the directory is not writable.
  const fs::path probe = dir / ".exl3-bench-write-test";
  {
    std::ofstream out(probe);
    if (!out) return absl::PermissionDeniedError(absl::StrCat("--out: directory ", dir.string(), " is not writable"));
  }
  fs::remove(probe, ec);
  return absl::OkStatus();
}

// Consecutive modules per shard: a new shard starts when the next module would exceed the limit.
std::vector<std::vector<const PlannedModule*>> shard_modules(const ModelPlan& plan, uint64_t limit_bytes) {
  std::vector<std::vector<const PlannedModule*>> shards(1);
  uint64_t used = 0;
  for (const PlannedModule& m : plan.modules) {
    if (!shards.back().empty() && used + m.bytes() > limit_bytes) {
      shards.emplace_back();
      used = 0;
    }
    shards.back().push_back(&m);
    used += m.bytes();
  }
  return shards;
}

const char* torch_dtype(DType d) {
  switch (d) {
    case DType::kF16: return "torch.float16";
    case DType::kBF16: return "torch.bfloat16";
    case DType::kI16: return "torch.int16";
    case DType::kI32: return "torch.int32";
    default: return "torch.float32";
  }
}

json quantization_config(const MakeModelOptions& o, const ModelPlan& plan) {
  return {{"quant_method", "exl3"},
          {"version", "1.4.1"},
          {"bits", std::round(plan.decoder_bits * 100.0) / 100.0},
          {"head_bits", o.plan.head_bits},
          {"calibration", {{"rows", 0}, {"cols", 0}}},
          {"out_scales", "always"},
          {"codebook", o.plan.codebook}};
}

// quantization_config.json: the quantization_config plus tensor_storage for every module, as
// ExLlamaV3 writes it (informational; nothing loads it).
json quantization_config_file(const MakeModelOptions& o, const ModelPlan& plan) {
  json q = quantization_config(o, plan);
  q["synthetic"] = {{"tool", "exl3-bench make-model"},
                    {"shape", plan.shape.name},
                    {"seed", o.plan.seed},
                    {"target_bpw", o.plan.bpw}};
  std::map<std::string, const PlannedLinear*> linears;
  for (const PlannedLinear& l : plan.linears) linears[l.prefix] = &l;
  json storage = json::object();
  for (const PlannedModule& m : plan.modules) {
    for (const StreamTensor& t : m.tensors) {
      const std::string key = t.name.substr(0, t.name.rfind('.'));
      json& entry = storage[key];
      entry["stored_tensors"][t.name] = {{"shape", t.shape}, {"n_bytes", t.nbytes()}, {"dtype", torch_dtype(t.dtype)}};
      const auto lin = linears.find(key);
      if (lin != linears.end() && lin->second->bits != 16) {
        entry["quant_format"] = "exl3";
        entry["bits_per_weight"] = lin->second->bits;
        if (lin->second->codebook == "mcg") entry["mcg_multiplier"] = static_cast<uint32_t>(kMcgMarkerValue);
        if (lin->second->codebook == "mul1") entry["mul1_multiplier"] = static_cast<uint32_t>(kMul1MarkerValue);
      }
    }
  }
  q["tensor_storage"] = storage;
  return q;
}

absl::Status check_free_space(const fs::path& dir, uint64_t needed) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) return absl::OkStatus();  // unknown: let the writes tell
  const uint64_t avail = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if (avail < needed) {
    return absl::ResourceExhaustedError(absl::StrFormat("--out: the model needs %.2f GiB but %s has only %.2f GiB free",
                                                        needed / kGiB, dir.string(), avail / kGiB));
  }
  return absl::OkStatus();
}

WriteProgressFn progress_printer(std::FILE* log, std::chrono::steady_clock::time_point t0) {
  if (log == nullptr) return nullptr;
  const bool tty = ::isatty(::fileno(log)) != 0;
  return [log, t0, tty](uint64_t done, uint64_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(log, "%s  written %s / %s (%3.0f%%), %.2f GiB/s%s", tty ? "\r" : "", format_size(done, total).c_str(),
                 format_size(total, total).c_str(), total ? 100.0 * done / total : 100.0, s > 0 ? done / kGiB / s : 0.0,
                 tty && done < total ? "" : "\n");
    std::fflush(log);
  };
}

}  // namespace

absl::StatusOr<MakeModelReport> make_model(const MakeModelOptions& o) {
  EXL3_ASSIGN_OR_RETURN(const ModelPlan plan, plan_model(o.plan));
  if (o.shard_mib < 1) return absl::InvalidArgumentError("--shard-mib: must be >= 1");
  if (o.threads < 0) return absl::InvalidArgumentError(absl::StrCat("--threads: ", o.threads, " must be >= 0"));
  if (!o.tokenizer_path.empty() && !fs::is_regular_file(o.tokenizer_path)) {
    return absl::NotFoundError(absl::StrCat("--tokenizer: ", o.tokenizer_path, " is not a file"));
  }
  const fs::path dir(o.out_dir);
  EXL3_RETURN_IF_ERROR(prepare_out_dir(dir, o.overwrite));

  const auto shards = shard_modules(plan, o.shard_mib << 20);
  std::vector<StreamFile> files;
  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shards.size() == 1 ? std::string("model.safetensors")
                                                : absl::StrFormat("model-%05d-of-%05d.safetensors", i + 1, shards.size());
    StreamFile f;
    f.path = (dir / name).string();
    for (const PlannedModule* m : shards[i]) {
      for (const StreamTensor& t : m->tensors) {
        f.tensors.push_back(t);
        weight_map[t.name] = name;
      }
    }
    files.push_back(std::move(f));
  }
  EXL3_RETURN_IF_ERROR(check_free_space(dir, plan.total_bytes()));

  MakeModelReport report;
  report.num_layers = plan.num_layers;
  report.decoder_bits = plan.decoder_bits;
  for (const PlannedLinear& l : plan.linears) {
    if (l.decoder) ++report.linears_per_bits[l.bits];
    if (!l.codebook.empty()) ++report.linears_per_codebook[l.codebook];
  }
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.log) {
    std::fprintf(o.log, "make-model: %s, %lld layers, %.2f bpw decoder (target %.2f), head %d bits, codebook %s\n",
                 plan.shape.name.c_str(), static_cast<long long>(plan.num_layers), plan.decoder_bits, o.plan.bpw,
                 o.plan.head_bits, o.plan.codebook.c_str());
    std::fprintf(o.log, "  writing %s in %zu file(s) to %s with %d threads\n",
                 format_size(plan.total_bytes(), plan.total_bytes()).c_str(), files.size(), dir.string().c_str(), threads);
  }
  const auto t0 = std::chrono::steady_clock::now();
  StreamWriteOptions write_options;
  write_options.seed = o.plan.seed;
  write_options.threads = threads;
  write_options.progress = progress_printer(o.log, t0);
  EXL3_RETURN_IF_ERROR(write_stream_files(files, write_options));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const StreamFile& f : files) {
    report.files.push_back(f.path);
    report.bytes += fs::file_size(f.path);
  }

  if (files.size() > 1) {
    EXL3_RETURN_IF_ERROR(write_json(dir / "model.safetensors.index.json",
                                    {{"metadata", {{"total_size", plan.total_bytes()}}}, {"weight_map", weight_map}}));
  }
  EXL3_RETURN_IF_ERROR(write_json(dir / "quantization_config.json", quantization_config_file(o, plan)));
  EXL3_RETURN_IF_ERROR(write_json(dir / "generation_config.json", {{"bos_token_id", plan.shape.bos_token_id},
                                                                   {"eos_token_id", plan.shape.eos_token_id},
                                                                   {"do_sample", false}}));
  if (o.tokenizer_path.empty()) {
    EXL3_RETURN_IF_ERROR(write_synthetic_tokenizer(dir.string(), plan.shape));
  } else {
    // tokenizer.json, and its tokenizer_config.json / special_tokens_map.json when they lie beside it.
    const fs::path src(o.tokenizer_path);
    std::vector<std::pair<fs::path, std::string>> copies = {{src, "tokenizer.json"}};
    for (const char* f : kTokenizerSideFiles) {
      if (fs::is_regular_file(src.parent_path() / f)) copies.emplace_back(src.parent_path() / f, f);
    }
    for (const auto& [from, to] : copies) {
      std::error_code ec;
      fs::copy_file(from, dir / to, fs::copy_options::overwrite_existing, ec);
      if (ec) return absl::PermissionDeniedError(absl::StrCat("--tokenizer: cannot copy ", from.string(), " (", ec.message(), ")"));
    }
  }
  json config = hf_config_json(plan.shape, plan.num_layers);
  config["quantization_config"] = quantization_config(o, plan);
  EXL3_RETURN_IF_ERROR(write_json(dir / "config.json", config));
  return report;
}

std::string format_make_model_report(const MakeModelOptions& o, const MakeModelReport& r) {
  std::string bits, codebooks;
  int linears = 0;
  for (const auto& [k, n] : r.linears_per_bits) {
    absl::StrAppend(&bits, bits.empty() ? "" : ", ", n, " x K=", k);
    linears += n;
  }
  for (const auto& [cb, n] : r.linears_per_codebook) absl::StrAppend(&codebooks, codebooks.empty() ? "" : ", ", n, " ", cb);
  std::string out = absl::StrFormat("wrote %s: %s in %zu file(s), %.2f s, %.2f GiB/s\n", o.out_dir,
                                    format_size(r.bytes, r.bytes), r.files.size(), r.seconds,
                                    r.seconds > 0 ? r.bytes / kGiB / r.seconds : 0.0);
  absl::StrAppend(&out, absl::StrFormat("  decoder: %d linears (%s), mean K %.4f (target %.2f)\n", linears, bits,
                                        r.decoder_bits, o.plan.bpw));
  absl::StrAppend(&out, absl::StrFormat("  head: %s; codebooks: %s\n",
                                        o.plan.head_bits == 16 ? std::string("fp16 lm_head.weight")
                                                               : absl::StrCat("EXL3 K=", o.plan.head_bits),
                                        codebooks));
  return out;
}

}  // namespace exl3
