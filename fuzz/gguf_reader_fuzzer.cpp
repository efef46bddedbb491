// libFuzzer target: a GGUF file of arbitrary bytes through GgufFile::parse (import/gguf_reader.h),
// then everything exl3-import derives from an accepted file: every metadata item, every tensor's
// bytes dequantized (supported types), the llama config and tensor plan, and the tokenizer files
// serialized (they must be valid JSON whatever the file holds).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "import/gguf_dequant.h"
#include "import/gguf_reader.h"
#include "import/llama_arch.h"
#include "import/tokenizer_writer.h"

namespace {

// Bounds the decoding work of one input (tensor infos may all point at the same bytes).
constexpr int64_t kMaxDequantElements = int64_t{1} << 22;

void touch_value(const exl3::GgufValue& v, int depth) {
  volatile size_t sink = v.type_name().size() + v.s.size();
  (void)sink;
  if (v.type != exl3::GgufValueType::kArray) return;
  for (uint64_t k = 0; k < v.size(); ++k) touch_value(v.item(k), depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // An exact-size heap copy, so any read past the end is an ASan report.
  std::shared_ptr<uint8_t[]> copy(new uint8_t[size == 0 ? 1 : size]);
  if (size != 0) std::memcpy(copy.get(), data, size);
  auto parsed = exl3::GgufFile::parse(std::shared_ptr<const void>(copy, copy.get()), copy.get(), size, "fuzz.gguf");
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) std::abort();
    return 0;
  }
  const exl3::GgufFile& f = **parsed;
  if (f.data_offset() % f.alignment() != 0) std::abort();
  for (const auto& [key, value] : f.metadata()) touch_value(value, 0);

  int64_t budget = kMaxDequantElements;
  for (const exl3::GgufTensor& t : f.tensors()) {
    // The accepted tensor's promises: inside the file, aligned, sized by its type and dims.
    const auto traits = exl3::ggml_type_traits(t.type);
    if (!traits || t.offset % f.alignment() != 0) std::abort();
    if (t.data < copy.get() || t.data + t.nbytes > copy.get() + size) std::abort();
    if (t.numel % traits->block_size != 0 ||
        t.nbytes != static_cast<uint64_t>(t.numel) / traits->block_size * traits->block_bytes) {
      std::abort();
    }
    if (!exl3::gguf_dequant_supported(t.type) || t.numel > budget) continue;
    budget -= t.numel;
    auto values = exl3::dequantize_tensor(t);
    if (!values.ok() || values->numel() != t.numel) std::abort();
  }

  if (auto facts = exl3::read_llama_facts(f); facts.ok()) {
    auto plan = exl3::plan_llama_tensors(f, *facts);
    if (plan.ok()) {
      for (const exl3::TensorPlan& p : *plan) {
        if (p.source->hf_shape() != p.shape) std::abort();
      }
    }
  }
  auto tok = exl3::make_tokenizer_files(f, 4096);
  if (tok.ok()) {
    // Strings were checked for UTF-8, so serializing cannot throw.
    volatile size_t n = tok->tokenizer.dump().size() + tok->tokenizer_config.dump().size();
    (void)n;
    if (auto facts = exl3::read_llama_facts(f); facts.ok()) {
      auto config = exl3::make_llama_config(f, *facts, *tok, "bfloat16");
      if (config.ok()) {
        volatile size_t m = config->dump().size() + exl3::make_generation_config(*tok).dump().size();
        (void)m;
      }
    }
  }
  return 0;
}
