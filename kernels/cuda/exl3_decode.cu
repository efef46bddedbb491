// CUDA trellis decode: one warp per 16x16 tile, each lane decoding its 8 trellis positions with the
// same tile decoder the GEMM uses (exl3_tile.cuh), then scattering them to the dense [k, n] output
// by the position -> element map of exl3-format.md §4.4. Bit-exact with exl3_decode_ref.
#include "kernels/cuda/exl3_decode.cuh"

#include <cstdint>
#include <limits>

#include "kernels/check.h"
#include "kernels/cuda/cuda_check.cuh"
#include "kernels/cuda/exl3_tile.cuh"

namespace exl3 {
namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = 8;

template <int kBits, Codebook kCodebook>
__global__ void exl3_decode_kernel(const uint32_t* __restrict__ trellis, __half* __restrict__ out,
                                   int64_t num_tiles, int64_t tiles_n, int64_t n) {
  const int64_t tile =
      static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (tile >= num_tiles) return;
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t tk = tile / tiles_n;
  const int64_t tn = tile % tiles_n;

  const uint32_t* src = trellis + tile * trellis::tile_words(kBits);
  const trellis::LaneWindow win = trellis::lane_window<kBits>(lane);
  uint32_t w[3] = {src[win.word0], src[win.word1], 0};
  if constexpr (trellis::window_words<kBits>() > 2) w[2] = src[win.word2];
  uint32_t b[4];
  trellis::decode_lane<kBits, kCodebook>(w, win.shift, b);

  __half* tile_out = out + tk * trellis::kTileSize * n + tn * trellis::kTileSize;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int p = trellis::kPositionsPerLane * lane + i;
    const auto bits = static_cast<unsigned short>(b[i / 2] >> (16 * (i % 2)));
    tile_out[trellis::position_row(p) * n + trellis::position_col(p)] = __ushort_as_half(bits);
  }
}

}  // namespace

void launch_exl3_decode(const Exl3DecodeParams& params, cudaStream_t stream) {
  EXL3_CHECK(params.trellis != nullptr, "null trellis");
  EXL3_CHECK(params.out != nullptr, "null output");
  EXL3_CHECK(reinterpret_cast<uintptr_t>(params.trellis) % 4 == 0,
             "trellis must be 4-byte aligned");
  EXL3_CHECK(params.k > 0 && params.k % trellis::kTileSize == 0,
             "k must be a positive multiple of 16, got ", params.k);
  EXL3_CHECK(params.n > 0 && params.n % trellis::kTileSize == 0,
             "n must be a positive multiple of 16, got ", params.n);
  const int64_t tiles_n = params.n / trellis::kTileSize;
  const int64_t num_tiles = (params.k / trellis::kTileSize) * tiles_n;
  const int64_t grid = (num_tiles + kWarpsPerBlock - 1) / kWarpsPerBlock;
  EXL3_CHECK(grid <= std::numeric_limits<int32_t>::max(), "too many tiles: ", num_tiles);

  const auto* words = reinterpret_cast<const uint32_t*>(params.trellis);
  const bool known = trellis::dispatch_format(
      params.bits, params.codebook, [&]<int kBits, Codebook kCodebook>() {
        exl3_decode_kernel<kBits, kCodebook>
            <<<static_cast<unsigned>(grid), kWarpsPerBlock * kWarpSize, 0, stream>>>(
                words, params.out, num_tiles, tiles_n, params.n);
      });
  EXL3_CHECK(known, "unsupported format: bits ", params.bits, " codebook ",
             static_cast<int>(params.codebook), " (bits must be in 1..8)");
  EXL3_CUDA_CHECK_LAUNCH();
}

}  // namespace exl3
