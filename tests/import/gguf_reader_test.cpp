// GgufFile (import/gguf_reader.h): the fixture's metadata of every GGUF value type, tensor infos,
// alignment and data offsets; and malformed input (every truncation of a small file, corrupted
// counts, string lengths, value and tensor types, dims, offsets, alignment, version) giving an
// INVALID_ARGUMENT that names the field or tensor, never a crash (these tests are labelled cpu,
// so the ASan/UBSan CI stage runs them too).
#include "import/gguf_reader.h"

#include <cmath>

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "import/gguf_test_util.h"

namespace exl3 {
namespace {

using testing::GgufBuilder;
using testing::parse_bytes;
using testing::patch;

std::string message(const absl::Status& s) { return std::string(s.message()); }

#define EXPECT_PARSE_ERROR(bytes, fragment)                                                              \
  do {                                                                                                   \
    auto r_ = parse_bytes(bytes);                                                                        \
    ASSERT_FALSE(r_.ok()) << "parsed although it should mention: " << (fragment);                        \
    EXPECT_EQ(r_.status().code(), absl::StatusCode::kInvalidArgument) << r_.status();                    \
    EXPECT_NE(message(r_.status()).find(fragment), std::string::npos) << r_.status();                    \
    EXPECT_EQ(message(r_.status()).rfind("test.gguf: ", 0), 0u) << r_.status();                          \
  } while (0)

TEST(GgufReader, FixtureMetadataOfEveryType) {
  auto f = GgufFile::open(testing::test_data("gguf/types.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.data_offset() % 64, 0u);
  EXPECT_EQ(*g.get_string("general.architecture"), "types-test");
  EXPECT_EQ(g.find("test.u8")->u, 200u);
  EXPECT_EQ(g.find("test.i8")->i, -100);
  EXPECT_EQ(g.find("test.u16")->u, 60000u);
  EXPECT_EQ(g.find("test.i16")->i, -30000);
  EXPECT_EQ(*g.get_int("test.u32"), 4000000000);
  EXPECT_EQ(*g.get_int("test.i32"), -2000000000);
  EXPECT_EQ(*g.get_number("test.f32"), 0.125);
  EXPECT_EQ(g.find("test.u64")->u, (uint64_t{1} << 63) + 5);
  EXPECT_FALSE(g.get_int("test.u64").ok());  // beyond int64: refused, not wrapped
  EXPECT_EQ(*g.get_int("test.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(*g.get_number("test.f64"), -2.5e-300);
  EXPECT_EQ(*g.get_bool("test.bool"), true);
  EXPECT_EQ(*g.get_string("test.string"), "h\xC3\xA9llo \xF0\x9F\x98\x80");
  EXPECT_EQ(*g.get_string_array("test.strings"), (std::vector<std::string>{"a", "", "\xC3\xBC\xC3\xB1\xC3\xAE"}));
  EXPECT_EQ(*g.get_int_array("test.i16s"), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(g.find("test.i16s")->type_name(), "array of int16");
  const GgufValue* nested = g.find("test.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->size(), 2u);
  EXPECT_EQ(nested->item(0).type_name(), "array of int32");
  EXPECT_EQ(nested->item(0).item(1).as_int(), 2);
  EXPECT_EQ(nested->item(1).item(0).as_int(), 3);
  // Typed access names the key and the type it found.
  auto wrong = g.get_string("test.u8");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(message(wrong.status()).find("'test.u8' must be a string, not uint8"), std::string::npos);
  EXPECT_EQ(g.get_int("no.such.key").status().code(), absl::StatusCode::kNotFound);
}

TEST(GgufReader, FixtureTensorInfos) {
  auto f = GgufFile::open(testing::test_data("gguf/types.gguf"));
  ASSERT_TRUE(f.ok()) << f.status();
  const GgufTensor* q4k = (*f)->find_tensor("q4_k");
  ASSERT_NE(q4k, nullptr);
  EXPECT_EQ(q4k->dims, (std::vector<int64_t>{512, 3}));
  EXPECT_EQ(q4k->hf_shape(), (std::vector<int64_t>{3, 512}));
  EXPECT_EQ(q4k->type, static_cast<uint32_t>(GgmlType::kQ4_K));
  EXPECT_EQ(q4k->nbytes, 3u * 2u * 144u);
  EXPECT_EQ(q4k->offset % 64, 0u);
  const GgufTensor* t3 = (*f)->find_tensor("q8_0_3d");
  ASSERT_NE(t3, nullptr);
  EXPECT_EQ(t3->dims, (std::vector<int64_t>{64, 3, 2}));
  EXPECT_EQ(t3->numel, 384);
  EXPECT_EQ(ggml_type_name((*f)->find_tensor("iq2_xxs")->type), "IQ2_XXS");
  for (const GgufTensor& t : (*f)->tensors()) {
    EXPECT_NE(t.data, nullptr) << t.name;
    EXPECT_LE((*f)->data_offset() + t.offset + t.nbytes, (*f)->file_size()) << t.name;
  }
}

GgufBuilder small_builder() {
  GgufBuilder b;
  b.kv_string("general.architecture", "llama");
  b.kv_u32("llama.block_count", 1);
  b.kv_string_array("tokenizer.ggml.tokens", {"a", "bc", ""});
  b.kv_i32_array("tokenizer.ggml.token_type", {1, 1, 3});
  b.tensor("blk.0.attn_q.weight", {32, 2}, static_cast<uint32_t>(GgmlType::kQ8_0), std::string(2 * 34, '\x01'));
  b.tensor("output_norm.weight", {5}, static_cast<uint32_t>(GgmlType::kF32), std::string(20, '\0'));
  return b;
}

TEST(GgufReader, BuiltFileParses) {
  const auto built = small_builder().build();
  auto f = parse_bytes(built.bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ((*f)->data_offset(), built.data_offset);
  EXPECT_EQ((*f)->find_tensor("output_norm.weight")->offset, 96u);
  EXPECT_EQ(*(*f)->get_string_array("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "bc", ""}));
  // Version 2 has the same layout.
  std::string v2 = built.bytes;
  patch(v2, 4, uint32_t{2});
  EXPECT_TRUE(parse_bytes(v2).ok());
}

// Every prefix of the file short of its last tensor's end is refused with a message, and no
// prefix reads past its end (the copy is exactly that long).
TEST(GgufReader, EveryTruncationIsAnError) {
  const auto built = small_builder().build();
  const std::string& bytes = built.bytes;
  for (size_t n = 0; n < bytes.size(); ++n) {
    auto f = parse_bytes(bytes, n);
    ASSERT_FALSE(f.ok()) << "a " << n << "-byte prefix of " << bytes.size() << " parsed";
    ASSERT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << n << ": " << f.status();
    ASSERT_FALSE(message(f.status()).empty());
  }
  EXPECT_NE(message(parse_bytes(bytes, 0).status()).find("magic"), std::string::npos);
  EXPECT_NE(message(parse_bytes(bytes, 6).status()).find("version"), std::string::npos);
  EXPECT_NE(message(parse_bytes(bytes, 12).status()).find("tensor count"), std::string::npos);
  EXPECT_NE(message(parse_bytes(bytes, built.kv_key_length[3] + 3).status()).find("metadata key/value 3 key length"),
            std::string::npos);
  EXPECT_NE(message(parse_bytes(bytes, built.tensors[1].type + 2).status()).find("tensor 'output_norm.weight' type"),
            std::string::npos);
  const auto past = parse_bytes(bytes, bytes.size() - 1);
  EXPECT_NE(message(past.status()).find("tensor 'output_norm.weight': data ["), std::string::npos) << past.status();
  EXPECT_NE(message(past.status()).find(absl::StrCat("past the end of the file (", bytes.size() - 1, " bytes)")),
            std::string::npos)
      << past.status();
}

TEST(GgufReader, CorruptHeader) {
  const auto built = small_builder().build();
  std::string b = built.bytes;
  b[0] = 'X';
  EXPECT_PARSE_ERROR(b, "not a GGUF file");
  b = built.bytes;
  patch(b, 4, uint32_t{1});
  EXPECT_PARSE_ERROR(b, "version 1 is not supported");
  patch(b, 4, uint32_t{0x03000000});
  EXPECT_PARSE_ERROR(b, "big-endian");
  b = built.bytes;
  patch(b, 8, uint64_t{1} << 62);
  EXPECT_PARSE_ERROR(b, "tensor count 4611686018427387904 is impossible");
  b = built.bytes;
  patch(b, 8, ~uint64_t{0});  // count * size overflows
  EXPECT_PARSE_ERROR(b, "tensor count");
  b = built.bytes;
  patch(b, 16, uint64_t{1000});
  EXPECT_PARSE_ERROR(b, "metadata key/value count 1000 is impossible");
  b = built.bytes;
  patch(b, 8, uint64_t{3});  // one tensor info more than the file holds (read from the padding and data)
  EXPECT_PARSE_ERROR(b, "tensor");
}

TEST(GgufReader, CorruptMetadata) {
  const auto built = small_builder().build();
  std::string b = built.bytes;
  patch(b, built.kv_key_length[0], uint64_t{1} << 40);
  EXPECT_PARSE_ERROR(b, "metadata key/value 0 key: string length 1099511627776");
  b = built.bytes;
  patch(b, built.kv_key_length[0], ~uint64_t{0});
  EXPECT_PARSE_ERROR(b, "string length 18446744073709551615");
  b = built.bytes;
  patch(b, built.kv_type[1], uint32_t{13});
  EXPECT_PARSE_ERROR(b, "metadata 'llama.block_count': unknown value type 13");
  b = built.bytes;
  // The string array: item type, then its length.
  patch(b, built.kv_type[2] + 4, uint32_t{77});
  EXPECT_PARSE_ERROR(b, "metadata 'tokenizer.ggml.tokens': unknown array item type 77");
  b = built.bytes;
  patch(b, built.kv_type[2] + 8, uint64_t{1} << 60);
  EXPECT_PARSE_ERROR(b, "metadata 'tokenizer.ggml.tokens' array length 1152921504606846976 is impossible");
  b = built.bytes;
  patch(b, built.kv_type[2] + 16, uint64_t{1} << 50);  // the first string's length
  EXPECT_PARSE_ERROR(b, "metadata 'tokenizer.ggml.tokens'[0]: string length");
  b = built.bytes;
  patch(b, built.kv_type[3] + 8, uint64_t{1} << 61);  // int32 array length
  EXPECT_PARSE_ERROR(b, "metadata 'tokenizer.ggml.token_type' array length");
  // A duplicate key.
  GgufBuilder dup = small_builder();
  dup.kv_u32("llama.block_count", 2);
  EXPECT_PARSE_ERROR(dup.build().bytes, "metadata key 'llama.block_count' appears twice");
  // A bool that is neither 0 nor 1.
  GgufBuilder boolean;
  boolean.kv("flag", 7, std::string(1, '\x02'));
  EXPECT_PARSE_ERROR(boolean.build().bytes, "metadata 'flag': bool value 2");
  // Arrays nested without end.
  std::string deep;
  for (int i = 0; i < 20; ++i) deep += GgufBuilder::pod(uint32_t{9}) + GgufBuilder::pod(uint64_t{1});
  GgufBuilder nested;
  nested.kv("deep", 9, deep + GgufBuilder::pod(uint32_t{0}));
  EXPECT_PARSE_ERROR(nested.build().bytes, "arrays nested deeper than 8");
}

TEST(GgufReader, CorruptAlignment) {
  for (const uint32_t a : {0u, 3u, 48u}) {
    GgufBuilder b = small_builder();
    b.kv_u32("general.alignment", a);
    EXPECT_PARSE_ERROR(b.build().bytes, absl::StrCat("'general.alignment' must be a power of two (got ", a, ")"));
  }
  GgufBuilder typed = small_builder();
  typed.kv_i32("general.alignment", 32);
  EXPECT_PARSE_ERROR(typed.build().bytes, "'general.alignment' must be uint32, not int32");
  GgufBuilder ok = small_builder();
  ok.kv_u32("general.alignment", 128);
  const auto built = ok.build(128);
  auto f = parse_bytes(built.bytes);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->data_offset() % 128, 0u);
  EXPECT_EQ((*f)->find_tensor("output_norm.weight")->offset, 128u);
}

TEST(GgufReader, CorruptTensorInfos) {
  const auto built = small_builder().build();
  const auto& q = built.tensors[0];
  std::string b = built.bytes;
  patch(b, q.n_dims, uint32_t{5});
  EXPECT_PARSE_ERROR(b, "tensor 'blk.0.attn_q.weight': dimension count 5 is not in [1, 4]");
  patch(b, q.n_dims, uint32_t{0});
  EXPECT_PARSE_ERROR(b, "dimension count 0");
  b = built.bytes;
  patch(b, q.type, uint32_t{99});
  EXPECT_PARSE_ERROR(b, "tensor 'blk.0.attn_q.weight': unknown tensor type id 99");
  b = built.bytes;
  patch(b, q.type, uint32_t{4});  // a retired id
  EXPECT_PARSE_ERROR(b, "unknown tensor type id 4");
  b = built.bytes;
  patch(b, q.first_dim, uint64_t{33});
  EXPECT_PARSE_ERROR(b, "row length 33 is not a multiple of the Q8_0 block size (32)");
  b = built.bytes;
  patch(b, q.first_dim + 8, uint64_t{1} << 62);  // 32 * 2^62 elements overflow
  EXPECT_PARSE_ERROR(b, "element count overflows at dimension 1");
  b = built.bytes;
  patch(b, q.first_dim + 8, ~uint64_t{0});
  EXPECT_PARSE_ERROR(b, "element count overflows at dimension 1");
  b = built.bytes;
  patch(b, q.first_dim + 8, uint64_t{1} << 40);  // representable, but far past the end
  EXPECT_PARSE_ERROR(b, "tensor 'blk.0.attn_q.weight': data [");
  b = built.bytes;
  patch(b, q.offset, uint64_t{8});
  EXPECT_PARSE_ERROR(b, "data offset 8 is not a multiple of the alignment (32)");
  b = built.bytes;
  patch(b, q.offset, uint64_t{1} << 63);
  EXPECT_PARSE_ERROR(b, "past the end of the file");
  b = built.bytes;
  patch(b, q.offset, ~uint64_t{31});  // aligned, and data_offset + offset overflows
  EXPECT_PARSE_ERROR(b, "overflows");
  b = built.bytes;
  patch(b, q.name_length, uint64_t{1} << 33);
  EXPECT_PARSE_ERROR(b, "tensor info 0 name: string length 8589934592");
  GgufBuilder dup = small_builder();
  dup.tensor("output_norm.weight", {5}, 0, std::string(20, '\0'));
  EXPECT_PARSE_ERROR(dup.build().bytes, "tensor 'output_norm.weight' appears twice");
}

TEST(GgufReader, OpenErrors) {
  auto missing = GgufFile::open("/nonexistent/model.gguf");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto tokens = GgufFile::open(testing::test_data("gguf/types_ref.safetensors"));
  ASSERT_FALSE(tokens.ok());
  EXPECT_NE(message(tokens.status()).find("not a GGUF file"), std::string::npos) << tokens.status();
}

}  // namespace
}  // namespace exl3
