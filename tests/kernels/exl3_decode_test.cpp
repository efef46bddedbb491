// Tests of the CPU EXL3 trellis decode and codebooks (exl3-format.md §4–§6): ExLlamaV3's decode
// vectors for every K and codebook, the spec's worked values, an independent packer round trip,
// and the real layer-0 weights of the 4.0 bpw fixture model, all bit for bit.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "kernels/fp16.h"
#include "kernels/ops.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

constexpr Codebook kCodebooks[] = {Codebook::k3Inst, Codebook::kMcg, Codebook::kMul1};

const uint16_t* half_bits(const Tensor& t) { return static_cast<const uint16_t*>(t.raw()); }

// Number of differing fp16 bit patterns; prints the first few for diagnosis.
int64_t count_mismatches(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_EQ(got.dtype(), DType::kF16) << what;
  EXPECT_EQ(want.dtype(), DType::kF16) << what;
  EXPECT_EQ(got.shape(), want.shape()) << what;
  if (got.shape() != want.shape()) return got.numel();
  const int64_t cols = got.dim(1);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (half_bits(got)[i] == half_bits(want)[i]) continue;
    if (mismatches < 5) {
      std::printf("  %s mismatch at [%lld, %lld]: got 0x%04X want 0x%04X\n", what.c_str(),
                  static_cast<long long>(i / cols), static_cast<long long>(i % cols),
                  half_bits(got)[i], half_bits(want)[i]);
    }
    ++mismatches;
  }
  return mismatches;
}

TEST(Exl3Codebook, WorkedValuesOfTheSpec) {
  struct Row {
    uint16_t state;
    uint16_t want[3];  // 3INST, MCG, MUL1
  };
  const Row table[] = {
      {0x0000, {0x3A25, 0x3F60, 0xC2E8}},
      {0x0123, {0xB950, 0xBF27, 0xB4CB}},
      {0xDEF0, {0xBC1A, 0x42DE, 0xC006}},
      {0xFFFF, {0xB110, 0x3ACD, 0xB936}},
  };
  for (const Row& row : table) {
    for (int cb = 0; cb < 3; ++cb) {
      EXPECT_EQ(exl3_codebook_ref(row.state, kCodebooks[cb]), row.want[cb])
          << "state 0x" << std::hex << row.state << " codebook " << cb;
    }
  }
}

TEST(Exl3Codebook, StatisticsOverAllStatesMatchTheSpec) {
  struct Stats {
    double rms;
    size_t distinct;
  };
  const Stats want[3] = {{1.243711, 10598}, {1.244112, 10746}, {1.000312, 913}};
  for (int cb = 0; cb < 3; ++cb) {
    double sum_sq = 0.0;
    std::set<uint16_t> values;
    for (uint32_t s = 0; s < 65536; ++s) {
      const uint16_t h = exl3_codebook_ref(static_cast<uint16_t>(s), kCodebooks[cb]);
      const double v = half_bits_to_float(h);
      sum_sq += v * v;
      values.insert(h);
    }
    const double rms = std::sqrt(sum_sq / 65536.0);
    std::printf("codebook %d: rms %.6f, %zu distinct values\n", cb, rms, values.size());
    EXPECT_NEAR(rms, want[cb].rms, 1e-6) << "codebook " << cb;
    EXPECT_EQ(values.size(), want[cb].distinct) << "codebook " << cb;
  }
}

TEST(Exl3Decode, MatchesExllamaDecodeVectorsForEveryBitsAndCodebook) {
  const std::string path = testing::test_data("decode-vectors/exl3_decode_vectors.safetensors");
  EXL3_REQUIRE_FILE(path);
  absl::StatusOr<SafetensorsCollection> file = SafetensorsCollection::open_file(path);
  ASSERT_TRUE(file.ok()) << file.status();
  for (int bits = 1; bits <= 8; ++bits) {
    for (int cb = 0; cb < 3; ++cb) {
      const std::string prefix = "k" + std::to_string(bits) + ".cb" + std::to_string(cb);
      absl::StatusOr<Tensor> trellis = file->get(prefix + ".trellis");
      absl::StatusOr<Tensor> want = file->get(prefix + ".inner_fp16");
      ASSERT_TRUE(trellis.ok()) << trellis.status();
      ASSERT_TRUE(want.ok()) << want.status();
      const Tensor got = exl3_decode_ref(*trellis, bits, kCodebooks[cb]);
      const int64_t mismatches = count_mismatches(got, *want, prefix);
      std::printf("%s: %lld / %lld values differ\n", prefix.c_str(),
                  static_cast<long long>(mismatches), static_cast<long long>(got.numel()));
      EXPECT_EQ(mismatches, 0) << prefix;
    }
  }
}

// One tile from its 256 symbols, packed as §4.2 describes: symbols MSB-first into a bitstream,
// cut into 16-bit words, and the two words of every 32-bit pair swapped for storage.
std::vector<int16_t> pack_tile(const std::vector<uint32_t>& symbols, int bits) {
  std::vector<uint16_t> words(16 * bits, 0);
  int64_t bit = 0;
  for (uint32_t symbol : symbols) {
    for (int b = bits - 1; b >= 0; --b, ++bit) {
      if ((symbol >> b) & 1u) words[bit / 16] |= static_cast<uint16_t>(0x8000u >> (bit % 16));
    }
  }
  std::vector<int16_t> stored(words.size());
  for (size_t j = 0; j < words.size(); ++j) stored[j] = static_cast<int16_t>(words[j ^ 1]);
  return stored;
}

// The state recurrence of §4.3, started from the tail: state[p] = (state[p-1] << K | c[p]) & 0xFFFF.
std::vector<uint16_t> states_by_recurrence(const std::vector<uint32_t>& symbols, int bits) {
  uint32_t state = 0;
  for (int p = 256 - 16; p < 256; ++p) state = ((state << bits) | symbols[p]) & 0xFFFFu;
  std::vector<uint16_t> states(256);
  for (int p = 0; p < 256; ++p) {
    state = ((state << bits) | symbols[p]) & 0xFFFFu;
    states[p] = static_cast<uint16_t>(state);
  }
  return states;
}

// (row, col) of position p, written from the §4.4 table.
void position_to_element(int p, int* row, int* col) {
  const int lane = p / 8;
  const int j = p % 8;
  const int r0 = 2 * (lane % 4);
  const int rows[4] = {r0, r0 + 1, r0 + 8, r0 + 9};
  *row = rows[j % 4];
  *col = lane / 4 + (j >= 4 ? 8 : 0);
}

TEST(Exl3Decode, WorkedExampleOfTheSpec) {
  constexpr int kBits = 4;
  std::vector<uint32_t> symbols(256);
  for (int p = 0; p < 256; ++p) symbols[p] = p % 16;
  const std::vector<int16_t> stored = pack_tile(symbols, kBits);
  // Stored int16 (pair-swapped): 0x4567, 0x0123, 0xCDEF, 0x89AB, ...
  EXPECT_EQ(static_cast<uint16_t>(stored[0]), 0x4567);
  EXPECT_EQ(static_cast<uint16_t>(stored[1]), 0x0123);
  EXPECT_EQ(static_cast<uint16_t>(stored[2]), 0xCDEF);
  EXPECT_EQ(static_cast<uint16_t>(stored[3]), 0x89AB);

  const Tensor trellis = Tensor::from_vector(stored, {1, 1, 16 * kBits});
  // MCG has the most distinct values among the worked states, so states are told apart.
  const Tensor wq = exl3_decode_ref(trellis, kBits, Codebook::kMcg);
  auto at = [&](int r, int c) { return half_bits(wq)[r * 16 + c]; };
  auto value = [](uint16_t state) { return exl3_codebook_ref(state, Codebook::kMcg); };
  EXPECT_EQ(at(0, 0), value(0xDEF0));    // state[0] wraps: symbols 253, 254, 255, 0
  EXPECT_EQ(at(1, 0), value(0xEF01));    // state[1]
  EXPECT_EQ(at(8, 0), value(0xF012));    // state[2]
  EXPECT_EQ(at(9, 0), value(0x0123));    // state[3] lands at (9, 0)
  EXPECT_EQ(at(0, 8), value(0x1234));    // state[4] lands at (0, 8)
  EXPECT_EQ(at(15, 15), value(0xCDEF));  // state[255]
}

TEST(Exl3Decode, RoundTripsAnIndependentPackerForEveryBits) {
  std::mt19937 rng(1234);
  for (int bits = 1; bits <= 8; ++bits) {
    constexpr int kTilesK = 2;
    constexpr int kTilesN = 3;
    std::vector<int16_t> stored;
    std::vector<std::vector<uint16_t>> tile_states;
    for (int t = 0; t < kTilesK * kTilesN; ++t) {
      std::vector<uint32_t> symbols(256);
      for (uint32_t& s : symbols) s = rng() & ((1u << bits) - 1u);
      const std::vector<int16_t> tile = pack_tile(symbols, bits);
      stored.insert(stored.end(), tile.begin(), tile.end());
      tile_states.push_back(states_by_recurrence(symbols, bits));
    }
    const Tensor trellis = Tensor::from_vector(stored, {kTilesK, kTilesN, 16 * bits});
    for (Codebook cb : kCodebooks) {
      const Tensor wq = exl3_decode_ref(trellis, bits, cb);
      ASSERT_EQ(wq.shape(), Shape({16 * kTilesK, 16 * kTilesN}));
      int64_t mismatches = 0;
      for (int t = 0; t < kTilesK * kTilesN; ++t) {
        for (int p = 0; p < 256; ++p) {
          int r = 0;
          int c = 0;
          position_to_element(p, &r, &c);
          const int64_t index = (16 * (t / kTilesN) + r) * (16 * kTilesN) + 16 * (t % kTilesN) + c;
          mismatches += half_bits(wq)[index] != exl3_codebook_ref(tile_states[t][p], cb);
        }
      }
      EXPECT_EQ(mismatches, 0) << "bits " << bits << " codebook " << static_cast<int>(cb);
    }
  }
}

// Decodes model.layers.0.<proj> of the 4.0 bpw fixture and compares with ExLlamaV3's
// get_inner_weight_tensor() dump.
void expect_layer_inner_weight_matches(const std::string& proj) {
  const std::string model_path = testing::source_path("models/exl3-4.0bpw/model.safetensors");
  const std::string ref_path = testing::test_data("reference/exl3_4.0bpw_linears.safetensors");
  EXL3_REQUIRE_FILE(model_path);
  EXL3_REQUIRE_FILE(ref_path);
  absl::StatusOr<SafetensorsCollection> model = SafetensorsCollection::open_file(model_path);
  absl::StatusOr<SafetensorsCollection> ref = SafetensorsCollection::open_file(ref_path);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_TRUE(ref.ok()) << ref.status();

  const std::string prefix = "model.layers.0." + proj;
  absl::StatusOr<Tensor> trellis = model->get(prefix + ".trellis");
  absl::StatusOr<Tensor> marker = model->get(prefix + ".mul1");
  absl::StatusOr<Tensor> want = ref->get("layers.0." + proj + ".weight_inner_fp16");
  ASSERT_TRUE(trellis.ok()) << trellis.status();
  ASSERT_TRUE(marker.ok()) << marker.status();
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_FALSE(model->has(prefix + ".mcg"));
  EXPECT_EQ(marker->data<int32_t>()[0], -2082680531);  // 0x83DCD12D

  ASSERT_EQ(trellis->rank(), 3);
  const int bits = static_cast<int>(trellis->dim(2) / 16);
  EXPECT_EQ(bits, 4);
  const Tensor got = exl3_decode_ref(*trellis, bits, Codebook::kMul1);
  const int64_t mismatches = count_mismatches(got, *want, proj);
  std::printf("%s inner weight %s: %lld / %lld values differ\n", proj.c_str(),
              shape_string(got.shape()).c_str(), static_cast<long long>(mismatches),
              static_cast<long long>(got.numel()));
  EXPECT_EQ(mismatches, 0);
}

TEST(Exl3Decode, Layer0QProjMatchesExllamaInnerWeight) {
  expect_layer_inner_weight_matches("self_attn.q_proj");
}

TEST(Exl3Decode, Layer0DownProjMatchesExllamaInnerWeight) {
  expect_layer_inner_weight_matches("mlp.down_proj");
}

TEST(Exl3DecodeDeathTest, RejectsTrellisWhoseLastDimDoesNotMatchBits) {
  const Tensor trellis = Tensor::zeros(DType::kI16, {1, 1, 64});
  EXPECT_DEATH(exl3_decode_ref(trellis, 3, Codebook::kMul1), "does not match bits");
  EXPECT_DEATH(exl3_decode_ref(Tensor::zeros(DType::kI32, {1, 1, 64}), 4, Codebook::kMul1),
               "must be I16");
  EXPECT_DEATH(exl3_decode_ref(Tensor::zeros(DType::kI16, {1, 1, 144}), 9, Codebook::kMul1),
               "bits must be in 1..8");
}

}  // namespace
}  // namespace exl3
