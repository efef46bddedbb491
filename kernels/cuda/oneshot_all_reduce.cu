// CUDA one-shot all-reduce (oneshot_all_reduce.h): each thread sends its lines to every peer,
// then waits for the peers' lines in its own buffer and writes the sums. The device twin of
// oneshot_all_reduce_ref.
#include "kernels/cuda/oneshot_all_reduce.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/dtype_io.cuh"

namespace exl3 {
namespace {

using oneshot::kChunkBytes;

constexpr int kThreads = 256;
// Spins between two looks at the clock and the error word while a line is awaited.
constexpr int kSpinsPerCheck = 64;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Both words of a line, each read as one 64-bit access past the caches (a peer writes them).
__device__ __forceinline__ void load_line(const uint64_t* line, uint64_t& w0, uint64_t& w1) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(w0), "=l"(w1) : "l"(line) : "memory");
}

__device__ __forceinline__ void store_line(uint64_t* line, uint64_t w0, uint64_t w1) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(line), "l"(w0), "l"(w1) : "memory");
}

// The 8 payload bytes of chunk `chunk` of a part of `bytes` bytes (zeros past its end): one 64-bit
// load where the part is 8-byte aligned and the chunk whole, else oneshot::line_payload_bytewise.
__device__ __forceinline__ uint2 load_chunk(const uint8_t* part, int64_t bytes, int64_t chunk, bool aligned) {
  const int64_t begin = chunk * kChunkBytes;
  if (aligned && begin + kChunkBytes <= bytes) return *reinterpret_cast<const uint2*>(part + begin);
  const oneshot::LinePayload p = oneshot::line_payload_bytewise(part, bytes, chunk);
  return make_uint2(p.word0, p.word1);
}

template <typename T>
__device__ __forceinline__ T element_of(uint2 payload, int j) {
  constexpr int kPerWord = 4 / sizeof(T);
  const uint32_t word = j < kPerWord ? payload.x : payload.y;
  const int at = (j % kPerWord) * static_cast<int>(sizeof(T));
  if constexpr (sizeof(T) == 4) {
    return __uint_as_float(word);
  } else {
    const unsigned short bits = static_cast<unsigned short>(word >> (8 * at));
    if constexpr (std::is_same_v<T, __half>) {
      return __ushort_as_half(bits);
    } else {
      return __ushort_as_bfloat16(bits);
    }
  }
}

// Waits for line `line` of this call (`flag`) from rank `source` in the own buffer. False when the
// deadline passes, or another thread already gave up (error word set).
__device__ __forceinline__ bool await_line(const uint64_t* line, uint32_t flag, uint64_t timeout_ns, const oneshot::State* state,
                           uint2& payload) {
  uint64_t deadline = 0;
  for (int spins = 1;; ++spins) {
    uint64_t w0, w1;
    load_line(line, w0, w1);
    if (oneshot::line_arrived(w0, w1, flag)) {
      payload = make_uint2(oneshot::word_payload(w0), oneshot::word_payload(w1));
      return true;
    }
    if (spins % kSpinsPerCheck == 0) {
      const uint64_t now = global_ns();
      if (deadline == 0) deadline = now + timeout_ns;
      if (now > deadline || *reinterpret_cast<const volatile uint32_t*>(&state->error) != 0u) return false;
    }
  }
}

template <typename TIn, typename TOut, bool kAccumulate>
__global__ void oneshot_all_reduce_kernel(const OneshotAllReduceParams p) {
  wait_for_prerequisites();  // the part comes from the kernel before, and the buffers' last call is done
  allow_dependents();
  constexpr int kPerChunk = kChunkBytes / sizeof(TIn);
  const uint32_t flag = oneshot::next_flag(*reinterpret_cast<const volatile uint32_t*>(&p.state->flag));
  const int64_t bytes = p.count * static_cast<int64_t>(sizeof(TIn));
  const int64_t lines = oneshot::lines_for(bytes);
  const auto* part = static_cast<const uint8_t*>(p.input);
  const bool aligned = reinterpret_cast<uintptr_t>(part) % kChunkBytes == 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;

  for (int64_t l = first; l < lines; l += stride) {
    const uint2 payload = load_chunk(part, bytes, l, aligned);
    const uint64_t w0 = oneshot::pack_word(payload.x, flag);
    const uint64_t w1 = oneshot::pack_word(payload.y, flag);
    for (int r = 0; r < p.world_size; ++r) {
      if (r == p.rank) continue;
      auto* buffer = static_cast<uint64_t*>(p.buffers[r]);
      store_line(buffer + 2 * oneshot::line_offset(flag, p.world_size, p.rank, p.slot_lines, l), w0, w1);
    }
  }

  const auto* own = static_cast<const uint64_t*>(p.buffers[p.rank]);
  auto* out = static_cast<TOut*>(p.output);
  bool ok = true;
  for (int64_t l = first; ok && l < lines; l += stride) {
    float sums[kPerChunk];
    for (int j = 0; j < kPerChunk; ++j) sums[j] = 0.0f;
    for (int r = 0; r < p.world_size; ++r) {
      uint2 payload;
      if (r == p.rank) {
        payload = load_chunk(part, bytes, l, aligned);
      } else if (!await_line(own + 2 * oneshot::line_offset(flag, p.world_size, r, p.slot_lines, l), flag,
                             p.timeout_ns, p.state, payload)) {
        if (atomicCAS(&p.state->error, 0u, static_cast<uint32_t>(r + 1)) == 0u && p.host_error != nullptr) {
          *reinterpret_cast<volatile uint32_t*>(p.host_error) = static_cast<uint32_t>(r + 1);
          __threadfence_system();
        }
        ok = false;
        break;
      }
      for (int j = 0; j < kPerChunk; ++j) sums[j] += cuda_io::to_f32(element_of<TIn>(payload, j));
    }
    if (!ok) break;
    for (int j = 0; j < kPerChunk; ++j) {
      const int64_t i = l * kPerChunk + j;
      if (i >= p.count) break;
      const float value = kAccumulate ? cuda_io::to_f32(out[i]) + sums[j] : sums[j];
      out[i] = cuda_io::from_f32<TOut>(value);
    }
  }

  // The last block done makes this call's flag the state's, for the next call to advance.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&p.state->blocks_done, 1u) == gridDim.x - 1) {
      p.state->blocks_done = 0u;
      atomicExch(&p.state->flag, flag);
    }
  }
}

template <typename TIn, typename TOut, bool kAccumulate>
void launch_typed(const OneshotAllReduceParams& p, unsigned blocks, cudaStream_t stream) {
  launch_dependent(oneshot_all_reduce_kernel<TIn, TOut, kAccumulate>, dim3(blocks), dim3(kThreads), stream, p);
}

}  // namespace

void launch_oneshot_all_reduce(const OneshotAllReduceParams& p, cudaStream_t stream) {
  EXL3_CHECK(is_float_dtype(p.dtype), "oneshot_all_reduce: parts are ", dtype_name(p.dtype));
  EXL3_CHECK(p.out_dtype == p.dtype || p.out_dtype == DType::kF32, "oneshot_all_reduce: out ",
             dtype_name(p.out_dtype), " for ", dtype_name(p.dtype), " parts");
  EXL3_CHECK(p.world_size >= 1 && p.world_size <= oneshot::kMaxRanks && p.rank >= 0 && p.rank < p.world_size,
             "oneshot_all_reduce: rank ", p.rank, " of ", p.world_size);
  EXL3_CHECK(p.count >= 0, "oneshot_all_reduce: count ", p.count);
  const int64_t bytes = p.count * static_cast<int64_t>(dtype_size(p.dtype));
  EXL3_CHECK(oneshot::lines_for(bytes) <= p.slot_lines, "oneshot_all_reduce: ", bytes, " bytes over slots of ",
             p.slot_lines, " lines");
  if (p.count == 0) return;
  EXL3_CHECK(p.input != nullptr && p.output != nullptr && p.state != nullptr, "oneshot_all_reduce: null pointer");
  EXL3_CHECK(p.timeout_ns > 0 && p.max_blocks > 0, "oneshot_all_reduce: timeout ", p.timeout_ns, " ns, max blocks ",
             p.max_blocks);
  for (int r = 0; r < p.world_size; ++r) EXL3_CHECK(p.buffers[r] != nullptr, "oneshot_all_reduce: no buffer of rank ", r);
  const int64_t wanted = (oneshot::lines_for(bytes) + kThreads - 1) / kThreads;
  const auto blocks = static_cast<unsigned>(wanted < p.max_blocks ? wanted : p.max_blocks);
  cuda_io::visit_float_dtype(p.dtype, "oneshot_all_reduce parts", [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (p.out_dtype == DType::kF32 && p.dtype != DType::kF32) {
      if (p.accumulate) {
        launch_typed<T, float, true>(p, blocks, stream);
      } else {
        launch_typed<T, float, false>(p, blocks, stream);
      }
    } else if (p.accumulate) {
      launch_typed<T, T, true>(p, blocks, stream);
    } else {
      launch_typed<T, T, false>(p, blocks, stream);
    }
  });
}

}  // namespace exl3
