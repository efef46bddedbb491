// libFuzzer target: a .safetensors file of arbitrary bytes through SafetensorsFile::open, then
// every tensor it accepts read back in full (views and the misaligned-copy path).
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_util.h"
#include "worker/loader/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static exl3::fuzz::MemFile file;
  file.write(data, size);
  absl::StatusOr<std::unique_ptr<exl3::SafetensorsFile>> st = exl3::SafetensorsFile::open(file.path());
  if (!st.ok()) return 0;
  const exl3::SafetensorsFile& f = **st;
  for (const auto& [name, info] : f.tensors()) {
    // The accepted header's promises: inside the data section, size matching dtype and shape.
    if (info.begin > info.end || info.end > size) std::abort();
    if (info.end - info.begin != static_cast<uint64_t>(exl3::shape_numel(info.shape)) * exl3::dtype_size(info.dtype)) {
      std::abort();
    }
    absl::StatusOr<exl3::Tensor> t = f.get(name);
    if (!t.ok() || t->nbytes() != info.end - info.begin) std::abort();
    const auto* bytes = static_cast<const uint8_t*>(t->raw());
    uint8_t sum = 0;
    for (size_t i = 0; i < t->nbytes(); ++i) sum ^= bytes[i];
    volatile uint8_t sink = sum;
    (void)sink;
  }
  return 0;
}
