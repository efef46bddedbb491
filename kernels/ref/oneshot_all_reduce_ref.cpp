// Reference of the one-shot all-reduce's arithmetic: the sum over ranks in fp32, ranks in order,
// rounded once into the output (or added to it).
#include <cstring>

#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

float load_element(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::kF32) return t.data<float>()[i];
  uint16_t bits;
  std::memcpy(&bits, static_cast<const uint8_t*>(t.raw()) + 2 * i, 2);
  return t.dtype() == DType::kF16 ? half_bits_to_float(bits) : bf16_bits_to_float(bits);
}

void store_element(Tensor& t, int64_t i, float v) {
  if (t.dtype() == DType::kF32) {
    t.mutable_data<float>()[i] = v;
    return;
  }
  const uint16_t bits = t.dtype() == DType::kF16 ? float_to_half_bits(v) : float_to_bf16_bits(v);
  std::memcpy(static_cast<uint8_t*>(t.mutable_raw()) + 2 * i, &bits, 2);
}

bool float_dtype(DType d) { return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16; }

}  // namespace

void oneshot_all_reduce_ref(std::span<const Tensor> parts, Tensor& out, bool accumulate) {
  EXL3_CHECK(!parts.empty(), "oneshot_all_reduce_ref: no parts");
  const DType dtype = parts[0].dtype();
  EXL3_CHECK(float_dtype(dtype), "oneshot_all_reduce_ref: parts are ", dtype_name(dtype));
  EXL3_CHECK(out.dtype() == dtype || out.dtype() == DType::kF32, "oneshot_all_reduce_ref: out ",
             dtype_name(out.dtype()), " for ", dtype_name(dtype), " parts");
  for (const Tensor& p : parts) {
    EXL3_CHECK(p.on_host() && p.dtype() == dtype && p.numel() == out.numel(),
               "oneshot_all_reduce_ref: parts differ in device, dtype or count");
  }
  EXL3_CHECK(out.on_host(), "oneshot_all_reduce_ref: out not on the host");
  for (int64_t i = 0; i < out.numel(); ++i) {
    float sum = 0.0f;
    for (const Tensor& p : parts) sum += load_element(p, i);
    store_element(out, i, accumulate ? load_element(out, i) + sum : sum);
  }
}

}  // namespace exl3
