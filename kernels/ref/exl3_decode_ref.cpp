// CPU reference of the EXL3 trellis decode (exl3-format.md §4, §6): packed int16 tiles ->
// the inner weight Wq in fp16, bit-exact with ExLlamaV3's reconstruct kernel.
#include <array>
#include <cstdint>
#include <vector>

#include "kernels/check.h"
#include "kernels/ops.h"

namespace exl3 {
namespace {

constexpr int kTileSize = 16;
constexpr int kTileWeights = kTileSize * kTileSize;  // 256 symbols per tile
constexpr int kStateBits = 16;

// Tile element (row, col) of trellis position p: the mma.m16n8k16 B-fragment order of §4.4.
struct TileCoord {
  int row;
  int col;
};

TileCoord tile_coord(int p) {
  const int lane = p / 8;
  const int j = p % 8;
  const int r0 = 2 * (lane % 4);
  const int rows[4] = {r0, r0 + 1, r0 + 8, r0 + 9};
  return {rows[j % 4], lane / 4 + (j >= 4 ? 8 : 0)};
}

// The tile's bitstream as 32-bit words, first stream bit = MSB of words[0]. On disk the two
// 16-bit halves of every 32-bit pair are swapped, so a little-endian read of each pair of
// int16 gives the stream word directly (§4.2).
std::vector<uint32_t> tile_stream_words(const int16_t* tile, int bits) {
  const int num_words = 8 * bits;
  std::vector<uint32_t> words(num_words);
  for (int m = 0; m < num_words; ++m) {
    const uint32_t low = static_cast<uint16_t>(tile[2 * m]);
    const uint32_t high = static_cast<uint16_t>(tile[2 * m + 1]);
    words[m] = low | (high << 16);
  }
  return words;
}

// State of position p: the 16 stream bits that end with symbol p, read circularly over the
// 256·bits-bit stream (§4.3). The window starts at bit `start` and, being 16 bits long, lies
// within word start/32 and the word after it (wrapping to word 0 at the end of the tile).
uint16_t trellis_state(const std::vector<uint32_t>& words, int bits, int p) {
  const int stream_len = kTileWeights * bits;
  const int start = ((p + 1) * bits - kStateBits + stream_len) % stream_len;
  const size_t w0 = static_cast<size_t>(start / 32);
  const size_t w1 = (w0 + 1) % words.size();
  const uint64_t two_words = (static_cast<uint64_t>(words[w0]) << 32) | words[w1];
  const int shift = 64 - kStateBits - start % 32;
  return static_cast<uint16_t>((two_words >> shift) & 0xFFFFu);
}

// exl3_codebook_ref for all 65536 states of each codebook, built once (about 200k codebook
// evaluations): a large layer decodes millions of weights, and the double-precision rounding
// in exl3_codebook_ref costs tens of nanoseconds per call.
const std::vector<uint16_t>& codebook_table(Codebook codebook) {
  static const std::array<std::vector<uint16_t>, 3> tables = [] {
    std::array<std::vector<uint16_t>, 3> t;
    for (int cb = 0; cb < 3; ++cb) {
      t[cb].resize(65536);
      for (uint32_t s = 0; s < 65536; ++s) {
        t[cb][s] = exl3_codebook_ref(static_cast<uint16_t>(s), static_cast<Codebook>(cb));
      }
    }
    return t;
  }();
  return tables[static_cast<size_t>(codebook)];
}

}  // namespace

std::vector<uint16_t> exl3_decode_states_ref(const Tensor& trellis, int bits) {
  EXL3_CHECK(trellis.dtype() == DType::kI16, "trellis must be I16, got ", dtype_name(trellis.dtype()));
  EXL3_CHECK(trellis.rank() == 3, "trellis must be rank 3, got ", shape_string(trellis.shape()));
  EXL3_CHECK(bits >= 1 && bits <= 8, "bits must be in 1..8, got ", bits);
  EXL3_CHECK(trellis.dim(2) == int64_t{kTileSize} * bits, "trellis shape ",
             shape_string(trellis.shape()), " does not match bits ", bits);

  const int64_t tiles_k = trellis.dim(0);
  const int64_t tiles_n = trellis.dim(1);
  const int64_t n = tiles_n * kTileSize;
  const int64_t tile_len = trellis.dim(2);

  std::vector<uint16_t> states(static_cast<size_t>(tiles_k * kTileSize * n));
  const int16_t* src = trellis.data<int16_t>();
  for (int64_t tk = 0; tk < tiles_k; ++tk) {
    for (int64_t tn = 0; tn < tiles_n; ++tn) {
      const int16_t* tile = src + (tk * tiles_n + tn) * tile_len;
      const std::vector<uint32_t> words = tile_stream_words(tile, bits);
      for (int p = 0; p < kTileWeights; ++p) {
        const TileCoord rc = tile_coord(p);
        const int64_t row = tk * kTileSize + rc.row;
        const int64_t col = tn * kTileSize + rc.col;
        states[static_cast<size_t>(row * n + col)] = trellis_state(words, bits, p);
      }
    }
  }
  return states;
}

Tensor exl3_decode_ref(const Tensor& trellis, int bits, Codebook codebook) {
  EXL3_CHECK(codebook == Codebook::k3Inst || codebook == Codebook::kMcg ||
                 codebook == Codebook::kMul1,
             "unknown codebook ", static_cast<int>(codebook));
  const std::vector<uint16_t> states = exl3_decode_states_ref(trellis, bits);
  const int64_t k = trellis.dim(0) * kTileSize;
  const int64_t n = trellis.dim(1) * kTileSize;
  Tensor out = Tensor::zeros(DType::kF16, {k, n});
  auto* wq = static_cast<uint16_t*>(out.mutable_raw());
  const std::vector<uint16_t>& decode = codebook_table(codebook);
  for (size_t i = 0; i < states.size(); ++i) wq[i] = decode[states[i]];
  return out;
}

}  // namespace exl3
