// Reference of the one-shot all-reduce's arithmetic: the sum over ranks in fp32, ranks in order,
// rounded once into the output (or added to it).
#include <cstring>
#include <vector>

#include "kernels/fp16.h"
#include "kernels/ops.h"

namespace exl3 {

void oneshot_all_reduce_ref(std::span<const Tensor> parts, Tensor& out, bool accumulate) {
  EXL3_CHECK(!parts.empty(), "oneshot_all_reduce_ref: no parts");
  const DType dtype = parts[0].dtype();
  EXL3_CHECK(is_float_dtype(dtype), "oneshot_all_reduce_ref: parts are ", dtype_name(dtype));
  EXL3_CHECK(out.dtype() == dtype || out.dtype() == DType::kF32, "oneshot_all_reduce_ref: out ",
             dtype_name(out.dtype()), " for ", dtype_name(dtype), " parts");
  for (const Tensor& p : parts) {
    EXL3_CHECK(p.on_host() && p.dtype() == dtype && p.numel() == out.numel(),
               "oneshot_all_reduce_ref: parts differ in device, dtype or count");
  }
  EXL3_CHECK(out.on_host(), "oneshot_all_reduce_ref: out not on the host");
  std::vector<Tensor> values;
  for (const Tensor& p : parts) values.push_back(p.to_f32());
  const Tensor before = out.to_f32();
  for (int64_t i = 0; i < out.numel(); ++i) {
    float sum = 0.0f;
    for (const Tensor& v : values) sum += v.data<float>()[i];
    const float result = accumulate ? before.data<float>()[i] + sum : sum;
    if (out.dtype() == DType::kF32) {
      out.mutable_data<float>()[i] = result;
      continue;
    }
    const uint16_t bits = out.dtype() == DType::kF16 ? float_to_half_bits(result) : float_to_bf16_bits(result);
    std::memcpy(static_cast<uint8_t*>(out.mutable_raw()) + 2 * i, &bits, 2);
  }
}

}  // namespace exl3
