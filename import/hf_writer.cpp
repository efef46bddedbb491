// The import driver: plan, convert and write a model directory (see hf_writer.h).
#include "import/hf_writer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "import/gguf_dequant.h"
#include "import/qk_permute.h"
#include "import/tokenizer_writer.h"
#include "kernels/fp16.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

absl::Status write_json(const fs::path& path, const json& j) {
  std::string text;
  try {
    text = j.dump(2, ' ', /*ensure_ascii=*/false);
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": cannot serialize: ", e.what()));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text << "\n";
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path.string(), ": write failed"));
  return absl::OkStatus();
}

absl::Status prepare_out_dir(const fs::path& dir, bool force) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) return absl::AlreadyExistsError(absl::StrCat(dir.string(), " exists and is not a directory"));
    if (!fs::is_empty(dir, ec)) {
      if (!force) {
        return absl::AlreadyExistsError(absl::StrCat(dir.string(), " is not empty (use --force to write into it)"));
      }
      // Stale shards would be loaded with the new ones (a directory without an index is every file).
      for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (entry.path().extension() == ".safetensors" || name == "model.safetensors.index.json") {
          fs::remove(entry.path(), ec);
          if (ec) return absl::InternalError(absl::StrCat("cannot remove ", entry.path().string(), ": ", ec.message()));
        }
      }
    }
  } else {
    fs::create_directories(dir, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir.string(), ": ", ec.message()));
  }
  return absl::OkStatus();
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    default: return "float32";
  }
}

}  // namespace

absl::StatusOr<Tensor> convert_tensor(const TensorPlan& plan, DType dtype) {
  if (dtype != DType::kBF16 && dtype != DType::kF16 && dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("output dtype ", dtype_name(dtype), " is not bf16, fp16 or fp32"));
  }
  EXL3_ASSIGN_OR_RETURN(Tensor f32, dequantize_tensor(*plan.source));
  if (plan.permute_heads > 0) {
    Tensor hf = Tensor::zeros(DType::kF32, f32.shape());
    unpermute_qk_rows(f32.data<float>(), hf.mutable_data<float>(), f32.dim(0), f32.dim(1), plan.permute_heads);
    f32 = std::move(hf);
  }
  if (dtype == DType::kF32) return f32;
  Tensor out = Tensor::zeros(dtype, f32.shape());
  const float* src = f32.data<float>();
  uint16_t* dst = static_cast<uint16_t*>(out.mutable_raw());
  const int64_t n = f32.numel();
  for (int64_t k = 0; k < n; ++k) {
    if (dtype == DType::kBF16) {
      dst[k] = float_to_bf16_bits(src[k]);
    } else {
      if (std::isfinite(src[k]) && std::fabs(src[k]) > 65504.0f) {
        return absl::OutOfRangeError(absl::StrCat("tensor ", plan.source->name, ": value ", src[k], " at element ", k,
                                                  " overflows float16 (use bf16)"));
      }
      dst[k] = float_to_half_bits(src[k]);
    }
  }
  return out;
}

absl::StatusOr<ImportSummary> import_gguf(const std::string& gguf_path, const std::string& out_dir,
                                          const ImportOptions& options) {
  const auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  EXL3_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::open(gguf_path));
  log(absl::StrCat(gguf_path, ": GGUF v", file->version(), ", ", file->metadata().size(), " metadata keys, ",
                   file->tensors().size(), " tensors, alignment ", file->alignment()));
  EXL3_ASSIGN_OR_RETURN(const LlamaFacts facts, read_llama_facts(*file));
  EXL3_ASSIGN_OR_RETURN(const TokenizerFiles tok, make_tokenizer_files(*file, facts.context));
  EXL3_ASSIGN_OR_RETURN(const json config, make_llama_config(*file, facts, tok, torch_dtype_name(options.dtype)));
  EXL3_ASSIGN_OR_RETURN(const std::vector<TensorPlan> plan, plan_llama_tensors(*file, facts));
  for (const TensorPlan& p : plan) {
    if (!gguf_dequant_supported(p.source->type)) {
      return absl::UnimplementedError(absl::StrCat("tensor ", p.source->name, " has type ", ggml_type_name(p.source->type),
                                                   ", which exl3-import does not support"));
    }
  }
  log(absl::StrCat("llama: ", facts.layers, " layers, hidden ", facts.hidden, ", ffn ", facts.ffn, ", heads ",
                   facts.heads, "/", facts.kv_heads, " (dim ", facts.head_dim, "), vocab ", facts.vocab, ", context ",
                   facts.context, facts.tied ? ", tied embeddings" : ""));
  log(absl::StrCat("tokenizer: ", tok.summary));

  const fs::path dir(out_dir);
  EXL3_RETURN_IF_ERROR(prepare_out_dir(dir, options.force));
  EXL3_RETURN_IF_ERROR(write_json(dir / "config.json", config));
  EXL3_RETURN_IF_ERROR(write_json(dir / "generation_config.json", make_generation_config(tok)));
  EXL3_RETURN_IF_ERROR(write_json(dir / "tokenizer.json", tok.tokenizer));
  EXL3_RETURN_IF_ERROR(write_json(dir / "tokenizer_config.json", tok.tokenizer_config));

  // Shards: consecutive tensors up to max_shard_bytes each (a larger tensor gets its own).
  const uint64_t elem = dtype_size(options.dtype);
  std::vector<int> shard_of(plan.size());
  int shards = 0;
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(plan[i].source->numel) * elem;
    if (shards == 0 || (in_shard > 0 && in_shard + bytes > options.max_shard_bytes)) {
      ++shards;
      in_shard = 0;
    }
    shard_of[i] = shards - 1;
    in_shard += bytes;
    total += bytes;
  }
  const auto shard_name = [&](int s) {
    return shards == 1 ? std::string("model.safetensors")
                       : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
  };

  json weight_map = json::object();
  std::map<std::string, Tensor> pending;
  uint64_t done_bytes = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const TensorPlan& p = plan[i];
    EXL3_ASSIGN_OR_RETURN(Tensor t, convert_tensor(p, options.dtype));
    done_bytes += t.nbytes();
    log(absl::StrFormat("[%zu/%zu] %s %s -> %s %s (%.1f / %.1f MB)", i + 1, plan.size(), p.source->name,
                        ggml_type_name(p.source->type), p.hf_name, shape_string(t.shape()), done_bytes / 1e6,
                        total / 1e6));
    weight_map[p.hf_name] = shard_name(shard_of[i]);
    pending.emplace(p.hf_name, std::move(t));
    if (i + 1 == plan.size() || shard_of[i + 1] != shard_of[i]) {
      const fs::path path = dir / shard_name(shard_of[i]);
      EXL3_RETURN_IF_ERROR(write_safetensors(path.string(), pending, {{"format", "pt"}}));
      log(absl::StrCat("wrote ", path.string()));
      pending.clear();
    }
  }
  if (shards > 1) {
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    EXL3_RETURN_IF_ERROR(write_json(dir / "model.safetensors.index.json", index));
  }
  ImportSummary summary;
  summary.tensors = static_cast<int64_t>(plan.size());
  summary.bytes = total;
  summary.shards = shards;
  summary.tokenizer = tok.summary;
  return summary;
}

}  // namespace exl3
