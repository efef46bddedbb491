// Dequantization (import/gguf_dequant.h) of every supported GGUF type, bit-exact (fp32 bits,
// NaN included) against the `gguf` Python package's own dequantization of the same bytes
// (tests/data/gguf/types_ref.safetensors, made by scripts/testdata/make_gguf_fixtures.py): odd row
// counts, several blocks per row, random block bits with subnormal, zero and negative scales.
#include "import/gguf_dequant.h"

#include <bit>
#include <cstdio>

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "worker/loader/safetensors.h"

namespace exl3 {
namespace {

class GgufDequant : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufDequant, BitExactWithGguf) {
  const std::string name = GetParam();
  auto f = GgufFile::open(testing::test_data("gguf/types.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  auto ref_file = SafetensorsFile::open(testing::test_data("gguf/types_ref.safetensors"));
  ASSERT_TRUE(ref_file.ok()) << ref_file.status();
  const GgufTensor* t = (*f)->find_tensor(name);
  ASSERT_NE(t, nullptr) << name;
  auto ref = (*ref_file)->get(name);
  ASSERT_TRUE(ref.ok()) << ref.status();
  auto got = dequantize_tensor(*t);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->shape(), ref->shape()) << shape_string(got->shape()) << " vs " << shape_string(ref->shape());
  const float* a = got->data<float>();
  const float* b = ref->data<float>();
  int64_t mismatches = 0;
  for (int64_t k = 0; k < got->numel(); ++k) {
    if (std::bit_cast<uint32_t>(a[k]) != std::bit_cast<uint32_t>(b[k])) {
      if (mismatches < 8) {
        std::printf("%s element %lld (row %lld, col %lld): got %.9g (0x%08x), gguf %.9g (0x%08x)\n", name.c_str(),
                    static_cast<long long>(k), static_cast<long long>(k / t->row_length()),
                    static_cast<long long>(k % t->row_length()), a[k], std::bit_cast<uint32_t>(a[k]), b[k],
                    std::bit_cast<uint32_t>(b[k]));
      }
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << name << ": " << mismatches << " of " << got->numel() << " elements differ";
}

INSTANTIATE_TEST_SUITE_P(Types, GgufDequant,
                         ::testing::Values("f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q2_k",
                                           "q3_k", "q4_k", "q5_k", "q6_k", "q8_0_3d"),
                         [](const auto& info) { return std::string(info.param); });

TEST(GgufDequantErrors, UnsupportedTypeRefusedByName) {
  auto f = GgufFile::open(testing::test_data("gguf/types.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufTensor* t = (*f)->find_tensor("iq2_xxs");
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(gguf_dequant_supported(t->type));
  auto r = dequantize_tensor(*t);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(std::string(r.status().message()).find("tensor iq2_xxs has type IQ2_XXS, which exl3-import does not support"),
            std::string::npos)
      << r.status();
}

TEST(GgufDequantErrors, SizesMustMatch) {
  std::vector<uint8_t> block(34, 0);
  std::vector<float> out(64);
  EXPECT_TRUE(dequantize_gguf(static_cast<uint32_t>(GgmlType::kQ8_0), block.data(), 34, out.data(), 32).ok());
  EXPECT_FALSE(dequantize_gguf(static_cast<uint32_t>(GgmlType::kQ8_0), block.data(), 34, out.data(), 64).ok());
  EXPECT_FALSE(dequantize_gguf(static_cast<uint32_t>(GgmlType::kQ8_0), block.data(), 33, out.data(), 32).ok());
  EXPECT_FALSE(dequantize_gguf(static_cast<uint32_t>(GgmlType::kQ8_0), block.data(), 34, out.data(), 31).ok());
  EXPECT_FALSE(dequantize_gguf(static_cast<uint32_t>(GgmlType::kQ8_1), block.data(), 34, out.data(), 32).ok());
  EXPECT_FALSE(dequantize_gguf(999, block.data(), 34, out.data(), 32).ok());
}

// A hand-made Q4_0 block: d = 0.5, nibbles 0..15 in the low halves and 15..0 in the high halves.
TEST(GgufDequantBlocks, HandMadeQ4_0) {
  std::vector<uint8_t> block(18);
  block[0] = 0x00;
  block[1] = 0x38;  // fp16 0.5
  for (int j = 0; j < 16; ++j) block[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  std::vector<float> out(32);
  ASSERT_TRUE(dequantize_gguf(static_cast<uint32_t>(GgmlType::kQ4_0), block.data(), 18, out.data(), 32).ok());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[j], 0.5f * static_cast<float>(j - 8)) << j;
    EXPECT_EQ(out[16 + j], 0.5f * static_cast<float>(7 - j)) << j;
  }
}

}  // namespace
}  // namespace exl3
