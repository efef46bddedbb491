// CUDA trellis decode: one thread block per 16x16 tile, one thread per trellis position. Each
// thread cuts its 16-bit state out of the tile's circular bitstream and maps it through the
// procedural codebook (exl3-format.md §4–§5), bit-exact with exl3_decode_ref.
#include "kernels/cuda/exl3_decode.cuh"

#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"

namespace exl3 {
namespace {

constexpr int kTileSize = 16;
constexpr int kTileWeights = kTileSize * kTileSize;  // 256 positions = threads per block
constexpr int kMaxBits = 8;
constexpr int kMaxTileWords = kTileWeights * kMaxBits / 32;  // 64 uint32 stream words

// The finisher of 3INST and MCG (§5). lo + hi is exact in fp32 (both halves lie in [0.125, 2)
// with 11-bit significands), so one rounding to fp16 equals the fp16 addition of the spec.
__device__ __forceinline__ __half two_half_finish(uint32_t x) {
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  const float lo = __half2float(__ushort_as_half(static_cast<unsigned short>(x & 0xFFFFu)));
  const float hi = __half2float(__ushort_as_half(static_cast<unsigned short>(x >> 16)));
  return __float2half_rn(lo + hi);
}

// MUL1 (§5): h = 1024 + byte sum of s·0x83DCD12D, value h·KINV + KBIAS rounded once. h·KINV needs
// 22 significant bits and the sum 20, so fp32 holds both exactly and the one rounding is the
// final fp16 conversion.
__device__ __forceinline__ __half mul1_decode(uint32_t state) {
  const uint32_t x = state * 0x83DCD12Du;
  const uint32_t byte_sum = (x & 0xFFu) + ((x >> 8) & 0xFFu) + ((x >> 16) & 0xFFu) + (x >> 24);
  const float h = 1024.0f + static_cast<float>(byte_sum);
  const float inv = __half2float(__ushort_as_half(static_cast<unsigned short>(0x1EEE)));
  const float bias = __half2float(__ushort_as_half(static_cast<unsigned short>(0xC931)));
  return __float2half_rn(fmaf(h, inv, bias));
}

template <Codebook kCodebook>
__device__ __forceinline__ __half codebook_decode(uint32_t state) {
  if constexpr (kCodebook == Codebook::k3Inst) {
    return two_half_finish(state * 89226354u + 64248484u);
  } else if constexpr (kCodebook == Codebook::kMcg) {
    return two_half_finish(state * 0xCBAC1FEDu);
  } else {
    return mul1_decode(state);
  }
}

template <Codebook kCodebook>
__global__ void exl3_decode_kernel(const int16_t* __restrict__ trellis, __half* __restrict__ out,
                                   int64_t tiles_n, int64_t n, int bits) {
  __shared__ uint32_t words[kMaxTileWords];

  const int64_t tile = blockIdx.x;
  const int64_t tk = tile / tiles_n;
  const int64_t tn = tile % tiles_n;
  const int num_words = 8 * bits;
  const int16_t* src = trellis + tile * kTileSize * bits;

  // Stored int16 pairs are half-swapped stream words: a little-endian pair read gives word m
  // with its first stream bit at the MSB (§4.2).
  const int t = threadIdx.x;
  if (t < num_words) {
    const uint32_t low = static_cast<uint16_t>(src[2 * t]);
    const uint32_t high = static_cast<uint16_t>(src[2 * t + 1]);
    words[t] = low | (high << 16);
  }
  __syncthreads();

  // State of position p = the 16 bits ending with symbol p, circular over 256·bits (§4.3). The
  // window starts inside word w0 at bit o and spans at most w0 and the next word.
  const int p = t;
  const int stream_len = kTileWeights * bits;
  const int start = ((p + 1) * bits - 16 + stream_len) % stream_len;
  const int w0 = start / 32;
  const int w1 = (w0 + 1) % num_words;
  const int o = start % 32;
  const uint64_t pair = (static_cast<uint64_t>(words[w0]) << 32) | words[w1];
  const uint32_t state = static_cast<uint32_t>(pair >> (48 - o)) & 0xFFFFu;

  // Position -> tile element in tensor-core order (§4.4).
  const int lane = p / 8;
  const int j = p % 8;
  const int r0 = 2 * (lane % 4);
  const int row = r0 + (j & 1) + ((j & 2) ? 8 : 0);
  const int col = lane / 4 + (j >= 4 ? 8 : 0);

  out[(tk * kTileSize + row) * n + tn * kTileSize + col] = codebook_decode<kCodebook>(state);
}

}  // namespace

void launch_exl3_decode(const Exl3DecodeParams& params, cudaStream_t stream) {
  EXL3_CHECK(params.trellis != nullptr, "null trellis");
  EXL3_CHECK(params.out != nullptr, "null output");
  EXL3_CHECK(params.k > 0 && params.k % kTileSize == 0, "k must be a positive multiple of 16, got ",
             params.k);
  EXL3_CHECK(params.n > 0 && params.n % kTileSize == 0, "n must be a positive multiple of 16, got ",
             params.n);
  EXL3_CHECK(params.bits >= 1 && params.bits <= kMaxBits, "bits must be in 1..8, got ", params.bits);
  const int64_t tiles_n = params.n / kTileSize;
  const int64_t num_tiles = (params.k / kTileSize) * tiles_n;
  EXL3_CHECK(num_tiles <= std::numeric_limits<int32_t>::max(), "too many tiles: ", num_tiles);

  const dim3 grid(static_cast<unsigned>(num_tiles));
  const dim3 block(kTileWeights);
  switch (params.codebook) {
    case Codebook::k3Inst:
      exl3_decode_kernel<Codebook::k3Inst><<<grid, block, 0, stream>>>(
          params.trellis, params.out, tiles_n, params.n, params.bits);
      break;
    case Codebook::kMcg:
      exl3_decode_kernel<Codebook::kMcg><<<grid, block, 0, stream>>>(
          params.trellis, params.out, tiles_n, params.n, params.bits);
      break;
    case Codebook::kMul1:
      exl3_decode_kernel<Codebook::kMul1><<<grid, block, 0, stream>>>(
          params.trellis, params.out, tiles_n, params.n, params.bits);
      break;
    default:
      EXL3_CHECK(false, "unknown codebook ", static_cast<int>(params.codebook));
  }
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
