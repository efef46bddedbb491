// Tests of the safetensors reader and writer (worker/loader/safetensors.h): round trips of every
// dtype, sharded and unsharded directories, and malformed files, each of which must give an error
// naming the file and the tensor (and never crash: truncations and header corruptions are swept).
#include "worker/loader/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "common/test_paths.h"
#include "gtest/gtest.h"
#include "kernels/fp16.h"

namespace exl3 {
namespace {

namespace fs = std::filesystem;

// A fresh, empty directory for the running test.
std::string test_dir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string dir =
      testing::work_path(std::string("safetensors_test/") + info->test_suite_name() + "." + info->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The file format by hand: little-endian u64 header length, JSON header, data.
std::string raw_file(const std::string& header, const std::string& data, uint64_t header_len) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(header_len >> (8 * i)));
  return out + header + data;
}
std::string raw_file(const std::string& header, const std::string& data) {
  return raw_file(header, data, header.size());
}

Tensor bits16(DType dtype, const std::vector<uint16_t>& bits, Shape shape) {
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  EXL3_CHECK_EQ(t.nbytes(), bits.size() * 2);
  std::memcpy(t.mutable_raw(), bits.data(), t.nbytes());
  return t;
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_TRUE(got.defined());
  EXPECT_EQ(got.dtype(), want.dtype());
  EXPECT_EQ(got.shape(), want.shape());
  ASSERT_EQ(got.nbytes(), want.nbytes());
  if (want.nbytes() > 0) {
    EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0);
  }
}

// The status is an error and its message contains every part.
void expect_error(const absl::Status& status, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(status.ok()) << "expected an error mentioning " << *parts.begin();
  for (const std::string& part : parts) {
    EXPECT_NE(status.message().find(part), std::string::npos) << "\"" << part << "\" not in: " << status.message();
  }
}

absl::Status open_status(const std::string& path) { return SafetensorsFile::open(path).status(); }

// One tensor of every dtype, a scalar and an empty tensor. "a_i8" sorts first and has 3 bytes,
// so every later tensor starts misaligned and exercises the reader's copying path.
std::map<std::string, Tensor> all_dtypes() {
  std::map<std::string, Tensor> t;
  t["a_i8"] = Tensor::from_vector<int8_t>({-128, 0, 127}, {3});
  t["f32"] = Tensor::from_vector<float>({1.5f, -2.0f, 0.0f, 3.25f, -1e-30f, 6e20f}, {2, 3});
  t["f16"] = bits16(
      DType::kF16,
      {float_to_half_bits(1.0f), float_to_half_bits(-2.5f), float_to_half_bits(65504.0f), float_to_half_bits(6e-8f)},
      {4});
  t["bf16"] = bits16(
      DType::kBF16,
      {float_to_bf16_bits(1.0f), float_to_bf16_bits(-3.0e38f), float_to_bf16_bits(0.1f), float_to_bf16_bits(-0.0f)},
      {2, 1, 2});
  t["i16"] = Tensor::from_vector<int16_t>({-32768, -1, 32767}, {3});
  t["i32"] = Tensor::from_vector<int32_t>({-2147483647 - 1, 7, 0, 2147483647}, {2, 2});
  t["i64"] = Tensor::from_vector<int64_t>({INT64_MIN, INT64_MAX}, {2});
  t["u8"] = Tensor::from_vector<uint8_t>({0, 255}, {1, 2});
  t["scalar"] = Tensor::from_vector<float>({3.5f}, {});
  t["empty"] = Tensor::zeros(DType::kF32, {0, 4});
  return t;
}

// ---- Round trips -------------------------------------------------------------------------------

TEST(Safetensors, RoundTripEveryDtype) {
  const std::string path = test_dir() + "/all.safetensors";
  const std::map<std::string, Tensor> tensors = all_dtypes();
  ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}, {"note", "test"}}).ok());

  // The header is padded so that the data section starts 8-byte aligned.
  const std::string bytes = read_bytes(path);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ((8 + header_len) % 8, 0u);

  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->path(), path);
  EXPECT_EQ((*file)->metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "test"}}));
  ASSERT_EQ((*file)->tensors().size(), tensors.size());
  for (const auto& [name, want] : tensors) {
    const TensorInfo* info = (*file)->find(name);
    ASSERT_NE(info, nullptr) << name;
    EXPECT_EQ(info->name, name);
    EXPECT_EQ(info->end - info->begin, want.nbytes()) << name;
    auto got = (*file)->get(name);
    ASSERT_TRUE(got.ok()) << got.status();
    expect_same(*got, want, name);
  }

  // Values through the float conversion, and a scalar of rank 0.
  auto f16 = (*file)->get("f16");
  ASSERT_TRUE(f16.ok());
  const Tensor f16_values = f16->to_f32();
  EXPECT_EQ(f16_values.data<float>()[1], -2.5f);
  EXPECT_EQ(f16_values.data<float>()[2], 65504.0f);
  auto scalar = (*file)->get("scalar");
  ASSERT_TRUE(scalar.ok());
  EXPECT_EQ(scalar->rank(), 0);
  EXPECT_EQ(scalar->numel(), 1);
  EXPECT_EQ(scalar->data<float>()[0], 3.5f);
  auto i64 = (*file)->get("i64");
  ASSERT_TRUE(i64.ok());
  EXPECT_EQ(i64->data<int64_t>()[0], INT64_MIN);
}

TEST(Safetensors, ViewsOutliveTheFile) {
  const std::string path = test_dir() + "/one.safetensors";
  const Tensor want = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  ASSERT_TRUE(write_safetensors(path, {{"w", want}}).ok());
  Tensor got;
  {
    auto file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto t = (*file)->get("w");
    ASSERT_TRUE(t.ok());
    got = *t;
  }
  expect_same(got, want, "w after the file object is gone");
}

TEST(Safetensors, EmptyFileHasNoTensors) {
  const std::string path = test_dir() + "/none.safetensors";
  ASSERT_TRUE(write_safetensors(path, {}).ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE((*file)->tensors().empty());
}

TEST(Safetensors, CollectionOpenFile) {
  const std::string path = test_dir() + "/all.safetensors";
  const std::map<std::string, Tensor> tensors = all_dtypes();
  ASSERT_TRUE(write_safetensors(path, tensors).ok());
  auto c = SafetensorsCollection::open_file(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->names().size(), tensors.size());
  for (const auto& [name, want] : tensors) {
    EXPECT_TRUE(c->has(name));
    EXPECT_EQ(c->file_of(name), path);
    auto got = c->get_checked(name, want.dtype(), want.shape());
    ASSERT_TRUE(got.ok()) << got.status();
    expect_same(*got, want, name);
  }
}

// ---- Directories -------------------------------------------------------------------------------

const Tensor kA = Tensor::from_vector<float>({1, 2, 3}, {3});
const Tensor kB = Tensor::from_vector<int32_t>({4, 5}, {1, 2});
const Tensor kC = Tensor::from_vector<int64_t>({6}, {});

std::string index_json(const std::map<std::string, std::string>& weight_map) {
  std::string s = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  bool first = true;
  for (const auto& [tensor, file] : weight_map) {
    s += (first ? "" : ", ") + ("\"" + tensor + "\": \"" + file + "\"");
    first = false;
  }
  return s + "}}";
}

TEST(SafetensorsCollection, ShardedWithIndex) {
  const std::string dir = test_dir();
  const std::string shard1 = "model-00001-of-00002.safetensors";
  const std::string shard2 = "model-00002-of-00002.safetensors";
  ASSERT_TRUE(write_safetensors(dir + "/" + shard1, {{"a", kA}, {"b", kB}}).ok());
  ASSERT_TRUE(write_safetensors(dir + "/" + shard2, {{"c", kC}}).ok());
  // A file the index does not list is not part of the model.
  ASSERT_TRUE(write_safetensors(dir + "/stray.safetensors", {{"z", kA}}).ok());
  write_bytes(dir + "/model.safetensors.index.json", index_json({{"a", shard1}, {"b", shard1}, {"c", shard2}}));

  auto c = SafetensorsCollection::open_dir(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(c->has("z"));
  EXPECT_EQ(fs::path(c->file_of("a")).filename().string(), shard1);
  EXPECT_EQ(fs::path(c->file_of("c")).filename().string(), shard2);
  for (const auto& [name, want] : std::map<std::string, Tensor>{{"a", kA}, {"b", kB}, {"c", kC}}) {
    auto got = c->get(name);
    ASSERT_TRUE(got.ok()) << got.status();
    expect_same(*got, want, name);
    EXPECT_EQ(c->find(name)->name, name);
  }
  EXPECT_EQ(c->find("z"), nullptr);
}

TEST(SafetensorsCollection, DirectoryWithoutIndex) {
  const std::string dir = test_dir();
  ASSERT_TRUE(write_safetensors(dir + "/part-b.safetensors", {{"c", kC}}).ok());
  ASSERT_TRUE(write_safetensors(dir + "/part-a.safetensors", {{"a", kA}, {"b", kB}}).ok());
  write_bytes(dir + "/config.json", "{}");
  write_bytes(dir + "/notes.safetensors.txt", "not a tensor file");

  auto c = SafetensorsCollection::open_dir(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(fs::path(c->file_of("b")).filename().string(), "part-a.safetensors");
  EXPECT_EQ(fs::path(c->file_of("c")).filename().string(), "part-b.safetensors");
  auto got = c->get_checked("b", DType::kI32, {1, 2});
  ASSERT_TRUE(got.ok()) << got.status();
  expect_same(*got, kB, "b");
}

TEST(SafetensorsCollection, MissingOrEmptyDirectory) {
  const std::string dir = test_dir();
  expect_error(SafetensorsCollection::open_dir(dir).status(), {dir, "no *.safetensors"});
  expect_error(SafetensorsCollection::open_dir(dir + "/absent").status(), {dir + "/absent"});
  EXPECT_EQ(SafetensorsCollection::open_dir(dir + "/absent").status().code(), absl::StatusCode::kNotFound);
  expect_error(SafetensorsCollection::open_file(dir + "/absent.safetensors").status(), {"absent.safetensors"});
}

// ---- Malformed files ---------------------------------------------------------------------------

// A valid two-tensor file: "first" F32 [2, 2] at [0, 16), "second" I16 [4] at [16, 24).
const std::string kGoodHeader = R"({"first": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},)"
                                R"( "second": {"dtype": "I16", "shape": [4], "data_offsets": [16, 24]}})";
const std::string kGoodData(24, '\x01');

TEST(SafetensorsMalformed, HandWrittenGoodFileOpens) {
  const std::string path = test_dir() + "/good.safetensors";
  write_bytes(path, raw_file(kGoodHeader, kGoodData));
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->tensors().size(), 2u);
}

TEST(SafetensorsMalformed, Truncated) {
  const std::string dir = test_dir();
  const std::string good = raw_file(kGoodHeader, kGoodData);

  const std::string in_data = dir + "/cut_in_data.safetensors";
  write_bytes(in_data, good.substr(0, good.size() - 3));
  expect_error(open_status(in_data), {in_data, "second", "truncated"});

  const std::string in_header = dir + "/cut_in_header.safetensors";
  write_bytes(in_header, good.substr(0, 8 + kGoodHeader.size() / 2));
  expect_error(open_status(in_header), {in_header, "header length"});

  for (size_t n : {0, 1, 7}) {
    const std::string tiny = dir + "/tiny" + std::to_string(n) + ".safetensors";
    write_bytes(tiny, good.substr(0, n));
    expect_error(open_status(tiny), {tiny, "too short"});
  }
}

TEST(SafetensorsMalformed, HeaderLengthLargerThanFile) {
  const std::string dir = test_dir();
  const std::string path = dir + "/long_header.safetensors";
  write_bytes(path, raw_file(kGoodHeader, kGoodData, 1'000'000));
  expect_error(open_status(path), {path, "header length 1000000"});
  // Lengths near 2^64 must not wrap around in the bounds check.
  write_bytes(path, raw_file(kGoodHeader, kGoodData, ~0ull - 4));
  expect_error(open_status(path), {path, "header length"});
  write_bytes(path, raw_file(kGoodHeader, kGoodData, 1ull << 63));
  expect_error(open_status(path), {path, "header length"});
}

// Opens a file with the given header over `data_bytes` bytes and expects an error naming the
// file, the tensor and `what`.
void expect_bad_header(const std::string& dir, const std::string& file_name, const std::string& header,
                       size_t data_bytes, const std::string& tensor, const std::string& what) {
  const std::string path = dir + "/" + file_name + ".safetensors";
  write_bytes(path, raw_file(header, std::string(data_bytes, '\0')));
  if (tensor.empty()) {
    expect_error(open_status(path), {path, what});
  } else {
    expect_error(open_status(path), {path, "\"" + tensor + "\"", what});
  }
}

TEST(SafetensorsMalformed, OffsetsOutOfRange) {
  const std::string dir = test_dir();
  expect_bad_header(dir, "past_end", R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 12, "w",
                    "past the end");
  expect_bad_header(dir, "far_past_end", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [1000, 1004]}})", 16,
                    "w", "past the end");
  expect_bad_header(dir, "begin_after_end", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 16, "w",
                    "begin > end");
  expect_bad_header(dir, "negative", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", 16, "w",
                    "non-negative");
  expect_bad_header(dir, "huge", R"({"w": {"dtype": "U8", "shape": [4], "data_offsets": [18446744073709551612, 0]}})",
                    16, "w", "data_offsets");
  expect_bad_header(dir, "float_offsets", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0.0, 4.0]}})", 16,
                    "w", "data_offsets");
  expect_bad_header(dir, "three_offsets", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", 16,
                    "w", "data_offsets");
  expect_bad_header(dir, "no_offsets", R"({"w": {"dtype": "F32", "shape": [1]}})", 16, "w", "data_offsets");
}

TEST(SafetensorsMalformed, SizeDoesNotMatchDtypeTimesShape) {
  const std::string dir = test_dir();
  expect_bad_header(dir, "short", R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 16, "w",
                    "needs 16");
  expect_bad_header(dir, "long", R"({"w": {"dtype": "F16", "shape": [3], "data_offsets": [0, 8]}})", 16, "w",
                    "needs 6");
  expect_bad_header(dir, "scalar", R"({"w": {"dtype": "I64", "shape": [], "data_offsets": [0, 4]}})", 16, "w",
                    "needs 8");
  expect_bad_header(dir, "empty", R"({"w": {"dtype": "F32", "shape": [0, 3], "data_offsets": [0, 4]}})", 16, "w",
                    "needs 0");
}

// A shape whose byte size overflows 64 bits must not wrap around to match a tiny data range.
TEST(SafetensorsMalformed, ShapeOverflow) {
  const std::string dir = test_dir();
  expect_bad_header(dir, "bytes_wrap",
                    R"({"w": {"dtype": "I64", "shape": [2305843009213693952], "data_offsets": [0, 0]}})", 8, "w",
                    "overflow");
  expect_bad_header(dir, "bytes_wrap_2d",
                    R"({"w": {"dtype": "F32", "shape": [2147483648, 2147483648], "data_offsets": [0, 0]}})", 8, "w",
                    "overflow");
  expect_bad_header(dir, "numel_wrap",
                    R"({"w": {"dtype": "U8", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 0]}})",
                    8, "w", "overflow");
}

TEST(SafetensorsMalformed, BadDtypeOrShape) {
  const std::string dir = test_dir();
  expect_bad_header(dir, "unknown_dtype", R"({"w": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}})", 8, "w",
                    "Q4");
  expect_bad_header(dir, "dtype_not_string", R"({"w": {"dtype": 4, "shape": [1], "data_offsets": [0, 4]}})", 8, "w",
                    "dtype");
  expect_bad_header(dir, "negative_dim", R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}})", 8, "w",
                    "shape");
  expect_bad_header(dir, "float_dim", R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", 8, "w",
                    "shape");
  expect_bad_header(dir, "shape_not_array", R"({"w": {"dtype": "F32", "shape": 1, "data_offsets": [0, 4]}})", 8, "w",
                    "shape");
  expect_bad_header(dir, "entry_not_object", R"({"w": [1, 2, 3]})", 8, "w", "not an object");
}

TEST(SafetensorsMalformed, HeaderNotAJsonObject) {
  const std::string dir = test_dir();
  expect_bad_header(dir, "array", "[1, 2, 3]", 8, "", "not a JSON object");
  expect_bad_header(dir, "invalid", R"({"w": {"dtype": "F32", )", 8, "", "not a JSON object");
  expect_bad_header(dir, "empty_header", "", 8, "", "not a JSON object");
  expect_bad_header(dir, "binary", std::string("\xff\xfe\0{", 4), 8, "", "not a JSON object");
  expect_bad_header(dir, "metadata_not_object", R"({"__metadata__": [1]})", 8, "", "__metadata__");
}

TEST(SafetensorsMalformed, MissingTensor) {
  const std::string dir = test_dir();
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"a", kA}}).ok());
  auto file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->find("nope"), nullptr);
  const absl::Status s = (*file)->get("nope").status();
  expect_error(s, {path, "\"nope\""});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);

  auto c = SafetensorsCollection::open_dir(dir);
  ASSERT_TRUE(c.ok());
  expect_error(c->get("nope").status(), {"\"nope\""});
  expect_error(c->get_checked("nope", DType::kF32, {3}).status(), {"\"nope\""});
  EXPECT_EQ(c->file_of("nope"), "(no file)");
}

TEST(SafetensorsMalformed, GetCheckedWrongDtypeOrShape) {
  const std::string dir = test_dir();
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(write_safetensors(path, {{"a", kA}}).ok());
  auto c = SafetensorsCollection::open_dir(dir);
  ASSERT_TRUE(c.ok());
  expect_error(c->get_checked("a", DType::kF16, {3}).status(), {path, "\"a\"", "F32 [3]", "expected F16 [3]"});
  expect_error(c->get_checked("a", DType::kF32, {1, 3}).status(), {path, "\"a\"", "F32 [3]", "expected F32 [1, 3]"});
  expect_error(c->get_checked("a", DType::kF32, {}).status(), {path, "\"a\"", "expected F32 []"});
}

TEST(SafetensorsMalformed, IndexListsTensorItsFileLacks) {
  const std::string dir = test_dir();
  ASSERT_TRUE(write_safetensors(dir + "/one.safetensors", {{"a", kA}}).ok());
  write_bytes(dir + "/model.safetensors.index.json",
              index_json({{"a", "one.safetensors"}, {"ghost", "one.safetensors"}}));
  expect_error(SafetensorsCollection::open_dir(dir).status(),
               {"model.safetensors.index.json", "\"ghost\"", "one.safetensors"});
}

TEST(SafetensorsMalformed, IndexPlacesTensorInTheWrongFile) {
  const std::string dir = test_dir();
  ASSERT_TRUE(write_safetensors(dir + "/one.safetensors", {{"b", kB}}).ok());
  ASSERT_TRUE(write_safetensors(dir + "/two.safetensors", {{"a", kA}}).ok());
  write_bytes(dir + "/model.safetensors.index.json", index_json({{"a", "one.safetensors"}, {"b", "two.safetensors"}}));
  expect_error(SafetensorsCollection::open_dir(dir).status(),
               {"model.safetensors.index.json", "\"a\"", "one.safetensors"});
}

TEST(SafetensorsMalformed, IndexNamesAMissingFile) {
  const std::string dir = test_dir();
  ASSERT_TRUE(write_safetensors(dir + "/one.safetensors", {{"a", kA}}).ok());
  write_bytes(dir + "/model.safetensors.index.json", index_json({{"a", "one.safetensors"}, {"b", "gone.safetensors"}}));
  expect_error(SafetensorsCollection::open_dir(dir).status(), {"gone.safetensors"});
}

TEST(SafetensorsMalformed, BadIndex) {
  const std::string dir = test_dir();
  const std::string index = dir + "/model.safetensors.index.json";
  ASSERT_TRUE(write_safetensors(dir + "/one.safetensors", {{"a", kA}}).ok());
  for (const std::string& text :
       {std::string("{\"weight_map\": "), std::string("[]"), std::string("{}"), std::string("{\"weight_map\": []}")}) {
    write_bytes(index, text);
    expect_error(SafetensorsCollection::open_dir(dir).status(), {index, "weight_map"});
  }
  write_bytes(index, R"({"weight_map": {"a": 1}})");
  expect_error(SafetensorsCollection::open_dir(dir).status(), {index, "\"a\""});
}

TEST(SafetensorsMalformed, SameTensorInTwoFiles) {
  const std::string dir = test_dir();
  ASSERT_TRUE(write_safetensors(dir + "/one.safetensors", {{"a", kA}, {"b", kB}}).ok());
  ASSERT_TRUE(write_safetensors(dir + "/two.safetensors", {{"a", kA}}).ok());
  expect_error(SafetensorsCollection::open_dir(dir).status(), {"\"a\"", "one.safetensors", "two.safetensors"});

  // The same with an index that names both files.
  write_bytes(dir + "/model.safetensors.index.json", index_json({{"a", "two.safetensors"}, {"b", "one.safetensors"}}));
  expect_error(SafetensorsCollection::open_dir(dir).status(), {"\"a\"", "one.safetensors", "two.safetensors"});
}

TEST(SafetensorsMalformed, CorruptFileInDirectoryNamesIt) {
  const std::string dir = test_dir();
  ASSERT_TRUE(write_safetensors(dir + "/one.safetensors", {{"a", kA}}).ok());
  write_bytes(dir + "/two.safetensors", raw_file(kGoodHeader, kGoodData.substr(0, 20)));
  expect_error(SafetensorsCollection::open_dir(dir).status(), {dir + "/two.safetensors", "\"second\""});
}

// ---- Sweeps: nothing crashes -------------------------------------------------------------------

// Opens the file; when that succeeds, reads every tensor completely (so that a sanitizer build
// sees any out-of-bounds view). Returns whether it opened.
bool open_and_read_all(const std::string& path) {
  auto file = SafetensorsFile::open(path);
  if (!file.ok()) {
    EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status();
    return false;
  }
  for (const auto& [name, info] : (*file)->tensors()) {
    auto t = (*file)->get(name);
    EXPECT_TRUE(t.ok()) << t.status();
    if (!t.ok()) continue;
    EXPECT_EQ(t->nbytes(), info.end - info.begin) << name;
    const Tensor copy = t->clone();
    EXPECT_EQ(copy.nbytes(), t->nbytes());
  }
  return true;
}

TEST(SafetensorsSweep, EveryTruncationFailsCleanly) {
  const std::string dir = test_dir();
  const std::string good_path = dir + "/good.safetensors";
  ASSERT_TRUE(write_safetensors(good_path, all_dtypes()).ok());
  const std::string good = read_bytes(good_path);
  const std::string path = dir + "/cut.safetensors";
  for (size_t n = 0; n < good.size(); ++n) {
    write_bytes(path, good.substr(0, n));
    // The last tensor by offset is non-empty, so every cut is an error.
    EXPECT_FALSE(open_and_read_all(path)) << "cut at " << n << " of " << good.size();
  }
  EXPECT_TRUE(open_and_read_all(good_path));
}

TEST(SafetensorsSweep, HeaderByteCorruptionsNeverCrash) {
  const std::string dir = test_dir();
  const std::string good = raw_file(kGoodHeader, kGoodData);
  const std::string path = dir + "/corrupt.safetensors";
  int opened = 0;
  int rejected = 0;
  for (size_t pos = 0; pos < 8 + kGoodHeader.size(); ++pos) {
    for (char c : {'0', '9', '-', '"', '}', ']', ',', 'e', '\0', '\xff'}) {
      std::string bytes = good;
      if (bytes[pos] == c) continue;
      bytes[pos] = c;
      write_bytes(path, bytes);
      (open_and_read_all(path) ? opened : rejected)++;
    }
  }
  // Most corruptions are caught; some (a digit in a name, a changed dtype of equal size) are valid.
  EXPECT_GT(rejected, opened);
  EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace exl3
