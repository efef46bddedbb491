// GGUF parsing with every length, count and offset checked against the file (see gguf_reader.h).
#include "import/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"

namespace exl3 {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;        // arrays of arrays nest at most this deep
// Least bytes one item takes in the file: a key/value pair (key length, value type, 1-byte
// value), a tensor info (name length, n_dims, type, offset), a string (its length).
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
constexpr uint64_t kStringLengthBytes = 8;
constexpr uint64_t kArrayHeaderBytes = 4 + 8;

bool checked_add(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_add_overflow(a, b, &out); }
bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) { return !__builtin_mul_overflow(a, b, &out); }

}  // namespace

// Reads the file front to back; each read is checked against the bytes left.
class GgufParser {
 public:
  explicit GgufParser(GgufFile& f) : f_(f) {}

  absl::Status run() {
    uint32_t magic = 0;
    EXL3_RETURN_IF_ERROR(read_scalar(magic, "magic"));
    if (magic != kMagic) {
      return f_.error(absl::StrCat("not a GGUF file (magic 0x", absl::Hex(magic, absl::kZeroPad8),
                                   ", expected 0x46554747 \"GGUF\")"));
    }
    EXL3_RETURN_IF_ERROR(read_scalar(f_.version_, "version"));
    if (f_.version_ != 2 && f_.version_ != 3) {
      if (f_.version_ == 0x02000000u || f_.version_ == 0x03000000u) {
        return f_.error("big-endian GGUF files are not supported");
      }
      return f_.error(absl::StrCat("version ", f_.version_, " is not supported (only 2 and 3)"));
    }
    uint64_t tensor_count = 0, kv_count = 0;
    EXL3_RETURN_IF_ERROR(read_scalar(tensor_count, "tensor count"));
    EXL3_RETURN_IF_ERROR(read_scalar(kv_count, "metadata key/value count"));
    EXL3_RETURN_IF_ERROR(check_count(kv_count, kMinKvBytes, "metadata key/value count"));
    EXL3_RETURN_IF_ERROR(check_count(tensor_count, kMinTensorInfoBytes, "tensor count"));

    f_.metadata_.reserve(kv_count);
    for (uint64_t k = 0; k < kv_count; ++k) {
      const std::string where = absl::StrCat("metadata key/value ", k);
      std::string key;
      EXL3_RETURN_IF_ERROR(read_string(key, where + " key"));
      if (f_.metadata_index_.count(key) != 0) return f_.error(absl::StrCat("metadata key '", key, "' appears twice"));
      uint32_t type = 0;
      EXL3_RETURN_IF_ERROR(read_scalar(type, absl::StrCat("metadata '", key, "' value type")));
      GgufValue value;
      EXL3_RETURN_IF_ERROR(read_value(type, value, absl::StrCat("metadata '", key, "'"), 0));
      f_.metadata_index_.emplace(key, f_.metadata_.size());
      f_.metadata_.emplace_back(std::move(key), std::move(value));
    }

    if (const GgufValue* a = f_.find("general.alignment")) {
      if (a->type != GgufValueType::kU32) {
        return f_.error(absl::StrCat("metadata 'general.alignment' must be uint32, not ", a->type_name()));
      }
      if (a->u == 0 || (a->u & (a->u - 1)) != 0) {
        return f_.error(absl::StrCat("metadata 'general.alignment' must be a power of two (got ", a->u, ")"));
      }
      f_.alignment_ = a->u;
    } else {
      f_.alignment_ = kDefaultAlignment;
    }

    f_.tensors_.reserve(tensor_count);
    for (uint64_t t = 0; t < tensor_count; ++t) {
      GgufTensor info;
      EXL3_RETURN_IF_ERROR(read_tensor_info(t, info));
      if (f_.tensor_index_.count(info.name) != 0) {
        return f_.error(absl::StrCat("tensor '", info.name, "' appears twice"));
      }
      f_.tensor_index_.emplace(info.name, f_.tensors_.size());
      f_.tensors_.push_back(std::move(info));
    }

    // The data section starts at the next multiple of the alignment.
    uint64_t data_offset = 0;
    if (!checked_add(pos_, f_.alignment_ - 1, data_offset)) return f_.error("data section offset overflows");
    data_offset -= data_offset % f_.alignment_;
    f_.data_offset_ = data_offset;
    for (GgufTensor& info : f_.tensors_) {
      uint64_t begin = 0, end = 0;
      if (!checked_add(data_offset, info.offset, begin) || !checked_add(begin, info.nbytes, end)) {
        return f_.error(absl::StrCat("tensor '", info.name, "': data offset ", info.offset, " + size ", info.nbytes,
                                     " overflows"));
      }
      if (end > f_.size_) {
        return f_.error(absl::StrCat("tensor '", info.name, "': data [", begin, ", ", end,
                                     ") past the end of the file (", f_.size_, " bytes)"));
      }
      info.data = f_.data_ + begin;
    }
    return absl::OkStatus();
  }

 private:
  uint64_t left() const { return f_.size_ - pos_; }

  absl::Status need(uint64_t n, const std::string& what) const {
    if (n > left()) {
      return f_.error(absl::StrCat(what, ": needs ", n, " bytes at offset ", pos_, " but the file ends at ",
                                   f_.size_));
    }
    return absl::OkStatus();
  }

  // A count of items that each take at least `min_bytes` must fit in the rest of the file.
  absl::Status check_count(uint64_t count, uint64_t min_bytes, const std::string& what) const {
    uint64_t bytes = 0;
    if (!checked_mul(count, min_bytes, bytes) || bytes > left()) {
      return f_.error(absl::StrCat(what, " ", count, " is impossible: ", left(), " bytes are left at offset ", pos_));
    }
    return absl::OkStatus();
  }

  template <typename T>
  absl::Status read_scalar(T& out, const std::string& what) {
    EXL3_RETURN_IF_ERROR(need(sizeof(T), what));
    std::memcpy(&out, f_.data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return absl::OkStatus();
  }

  absl::Status read_string(std::string& out, const std::string& what) {
    uint64_t length = 0;
    EXL3_RETURN_IF_ERROR(read_scalar(length, what + " length"));
    if (length > left()) {
      return f_.error(absl::StrCat(what, ": string length ", length, " at offset ", pos_ - 8, " exceeds the ",
                                   left(), " bytes left"));
    }
    out.assign(reinterpret_cast<const char*>(f_.data_ + pos_), length);
    pos_ += length;
    return absl::OkStatus();
  }

  absl::Status read_value(uint32_t type_id, GgufValue& v, const std::string& what, int depth) {
    if (type_id > static_cast<uint32_t>(GgufValueType::kF64)) {
      return f_.error(absl::StrCat(what, ": unknown value type ", type_id));
    }
    v.type = static_cast<GgufValueType>(type_id);
    switch (v.type) {
      case GgufValueType::kU8: { uint8_t x = 0; EXL3_RETURN_IF_ERROR(read_scalar(x, what)); v.u = x; break; }
      case GgufValueType::kU16: { uint16_t x = 0; EXL3_RETURN_IF_ERROR(read_scalar(x, what)); v.u = x; break; }
      case GgufValueType::kU32: { uint32_t x = 0; EXL3_RETURN_IF_ERROR(read_scalar(x, what)); v.u = x; break; }
      case GgufValueType::kU64: { EXL3_RETURN_IF_ERROR(read_scalar(v.u, what)); break; }
      case GgufValueType::kI8: { int8_t x = 0; EXL3_RETURN_IF_ERROR(read_scalar(x, what)); v.i = x; break; }
      case GgufValueType::kI16: { int16_t x = 0; EXL3_RETURN_IF_ERROR(read_scalar(x, what)); v.i = x; break; }
      case GgufValueType::kI32: { int32_t x = 0; EXL3_RETURN_IF_ERROR(read_scalar(x, what)); v.i = x; break; }
      case GgufValueType::kI64: { EXL3_RETURN_IF_ERROR(read_scalar(v.i, what)); break; }
      case GgufValueType::kF32: { float x = 0; EXL3_RETURN_IF_ERROR(read_scalar(x, what)); v.f = x; break; }
      case GgufValueType::kF64: { EXL3_RETURN_IF_ERROR(read_scalar(v.f, what)); break; }
      case GgufValueType::kBool: {
        uint8_t x = 0;
        EXL3_RETURN_IF_ERROR(read_scalar(x, what));
        if (x > 1) return f_.error(absl::StrCat(what, ": bool value ", x, " is neither 0 nor 1"));
        v.u = x;
        break;
      }
      case GgufValueType::kString: return read_string(v.s, what);
      case GgufValueType::kArray: {
        if (depth >= kMaxArrayDepth) return f_.error(absl::StrCat(what, ": arrays nested deeper than ", kMaxArrayDepth));
        uint32_t elem = 0;
        uint64_t count = 0;
        EXL3_RETURN_IF_ERROR(read_scalar(elem, what + " array item type"));
        EXL3_RETURN_IF_ERROR(read_scalar(count, what + " array length"));
        if (elem > static_cast<uint32_t>(GgufValueType::kF64)) {
          return f_.error(absl::StrCat(what, ": unknown array item type ", elem));
        }
        v.elem_type = static_cast<GgufValueType>(elem);
        uint64_t min_bytes = gguf_scalar_bytes(v.elem_type);
        if (v.elem_type == GgufValueType::kString) min_bytes = kStringLengthBytes;
        if (v.elem_type == GgufValueType::kArray) min_bytes = kArrayHeaderBytes;
        EXL3_RETURN_IF_ERROR(check_count(count, min_bytes, what + " array length"));
        if (min_bytes == gguf_scalar_bytes(v.elem_type)) {
          // Fits: check_count bounded count * min_bytes by the bytes left.
          v.raw.assign(reinterpret_cast<const char*>(f_.data_ + pos_), count * min_bytes);
          pos_ += count * min_bytes;
          if (v.elem_type == GgufValueType::kBool) {
            for (uint64_t k = 0; k < count; ++k) {
              if (static_cast<uint8_t>(v.raw[k]) > 1) {
                return f_.error(absl::StrCat(what, "[", k, "]: bool value ", static_cast<uint8_t>(v.raw[k]),
                                             " is neither 0 nor 1"));
              }
            }
          }
          break;
        }
        v.items.resize(count);
        for (uint64_t k = 0; k < count; ++k) {
          EXL3_RETURN_IF_ERROR(read_value(elem, v.items[k], absl::StrCat(what, "[", k, "]"), depth + 1));
        }
        break;
      }
    }
    return absl::OkStatus();
  }

  absl::Status read_tensor_info(uint64_t index, GgufTensor& info) {
    const std::string where = absl::StrCat("tensor info ", index);
    EXL3_RETURN_IF_ERROR(read_string(info.name, where + " name"));
    const std::string named = absl::StrCat("tensor '", info.name, "'");
    uint32_t n_dims = 0;
    EXL3_RETURN_IF_ERROR(read_scalar(n_dims, named + " dimension count"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return f_.error(absl::StrCat(named, ": dimension count ", n_dims, " is not in [1, ", kMaxDims, "]"));
    }
    uint64_t numel = 1;
    info.dims.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim = 0;
      EXL3_RETURN_IF_ERROR(read_scalar(dim, absl::StrCat(named, " dimension ", d)));
      if (dim > static_cast<uint64_t>(INT64_MAX) || !checked_mul(numel, dim, numel) ||
          numel > static_cast<uint64_t>(INT64_MAX)) {
        return f_.error(absl::StrCat(named, ": element count overflows at dimension ", d, " (", dim, ")"));
      }
      info.dims[d] = static_cast<int64_t>(dim);
    }
    info.numel = static_cast<int64_t>(numel);
    EXL3_RETURN_IF_ERROR(read_scalar(info.type, named + " type"));
    const auto traits = ggml_type_traits(info.type);
    if (!traits) return f_.error(absl::StrCat(named, ": unknown tensor type id ", info.type));
    if (info.dims[0] % traits->block_size != 0) {
      return f_.error(absl::StrCat(named, ": row length ", info.dims[0], " is not a multiple of the ", traits->name,
                                   " block size (", traits->block_size, ")"));
    }
    if (!checked_mul(numel / traits->block_size, traits->block_bytes, info.nbytes)) {
      return f_.error(absl::StrCat(named, ": byte size overflows"));
    }
    EXL3_RETURN_IF_ERROR(read_scalar(info.offset, named + " data offset"));
    if (info.offset % f_.alignment_ != 0) {
      return f_.error(absl::StrCat(named, ": data offset ", info.offset, " is not a multiple of the alignment (",
                                   f_.alignment_, ")"));
    }
    return absl::OkStatus();
  }

  GgufFile& f_;
  uint64_t pos_ = 0;
};

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufValueType::kU8: case GgufValueType::kU16: case GgufValueType::kU32: case GgufValueType::kU64:
    case GgufValueType::kI8: case GgufValueType::kI16: case GgufValueType::kI32: case GgufValueType::kI64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::is_number() const {
  return is_integer() || type == GgufValueType::kF32 || type == GgufValueType::kF64;
}

std::optional<int64_t> GgufValue::as_int() const {
  switch (type) {
    case GgufValueType::kU8: case GgufValueType::kU16: case GgufValueType::kU32: case GgufValueType::kU64:
      if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(u);
    case GgufValueType::kI8: case GgufValueType::kI16: case GgufValueType::kI32: case GgufValueType::kI64:
      return i;
    default:
      return std::nullopt;
  }
}

std::optional<double> GgufValue::as_number() const {
  if (type == GgufValueType::kF32 || type == GgufValueType::kF64) return f;
  if (type == GgufValueType::kU64) return static_cast<double>(u);
  if (const auto v = as_int()) return static_cast<double>(*v);
  return std::nullopt;
}

uint64_t GgufValue::size() const {
  if (type != GgufValueType::kArray) return 0;
  const uint32_t bytes = gguf_scalar_bytes(elem_type);
  return bytes != 0 ? raw.size() / bytes : items.size();
}

GgufValue GgufValue::item(uint64_t k) const {
  EXL3_CHECK(type == GgufValueType::kArray && k < size(), "item ", k, " of a ", type_name(), " of ", size());
  const uint32_t bytes = gguf_scalar_bytes(elem_type);
  if (bytes == 0) return items[k];
  GgufValue v;
  v.type = elem_type;
  const char* p = raw.data() + k * bytes;
  auto load = [p](auto x) {
    std::memcpy(&x, p, sizeof(x));
    return x;
  };
  switch (elem_type) {
    case GgufValueType::kU8: case GgufValueType::kBool: v.u = load(uint8_t{}); break;
    case GgufValueType::kU16: v.u = load(uint16_t{}); break;
    case GgufValueType::kU32: v.u = load(uint32_t{}); break;
    case GgufValueType::kU64: v.u = load(uint64_t{}); break;
    case GgufValueType::kI8: v.i = load(int8_t{}); break;
    case GgufValueType::kI16: v.i = load(int16_t{}); break;
    case GgufValueType::kI32: v.i = load(int32_t{}); break;
    case GgufValueType::kI64: v.i = load(int64_t{}); break;
    case GgufValueType::kF32: v.f = load(float{}); break;
    case GgufValueType::kF64: v.f = load(double{}); break;
    case GgufValueType::kString: case GgufValueType::kArray: break;
  }
  return v;
}

std::string GgufValue::type_name() const {
  if (type != GgufValueType::kArray) return gguf_value_type_name(static_cast<uint32_t>(type));
  return absl::StrCat("array of ", gguf_value_type_name(static_cast<uint32_t>(elem_type)));
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open (", std::strerror(errno), ")"));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat(path, ": fstat failed (", std::strerror(e), ")"));
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size == 0) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": the file is empty"));
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap failed (", std::strerror(e), ")"));
  std::shared_ptr<const void> owner(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
  return parse(std::move(owner), static_cast<const uint8_t*>(p), size, path);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::parse(std::shared_ptr<const void> owner, const uint8_t* data,
                                                         uint64_t size, std::string source) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->owner_ = std::move(owner);
  f->data_ = data;
  f->size_ = size;
  f->source_ = std::move(source);
  GgufParser parser(*f);
  EXL3_RETURN_IF_ERROR(parser.run());
  return f;
}

absl::Status GgufFile::error(const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(source_, ": ", what));
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<const GgufValue*> GgufFile::require(const std::string& key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat(source_, ": metadata '", key, "' is missing"));
  return v;
}

absl::StatusOr<std::string> GgufFile::get_string(const std::string& key) const {
  EXL3_ASSIGN_OR_RETURN(const GgufValue* v, require(key));
  if (v->type != GgufValueType::kString) return error(absl::StrCat("metadata '", key, "' must be a string, not ", v->type_name()));
  return v->s;
}

absl::StatusOr<int64_t> GgufFile::get_int(const std::string& key) const {
  EXL3_ASSIGN_OR_RETURN(const GgufValue* v, require(key));
  const auto x = v->as_int();
  if (!x) return error(absl::StrCat("metadata '", key, "' must be an integer below 2^63, not ", v->type_name()));
  return *x;
}

absl::StatusOr<double> GgufFile::get_number(const std::string& key) const {
  EXL3_ASSIGN_OR_RETURN(const GgufValue* v, require(key));
  const auto x = v->as_number();
  if (!x) return error(absl::StrCat("metadata '", key, "' must be a number, not ", v->type_name()));
  return *x;
}

absl::StatusOr<bool> GgufFile::get_bool(const std::string& key) const {
  EXL3_ASSIGN_OR_RETURN(const GgufValue* v, require(key));
  if (v->type != GgufValueType::kBool) return error(absl::StrCat("metadata '", key, "' must be a bool, not ", v->type_name()));
  return v->u != 0;
}

absl::StatusOr<std::vector<std::string>> GgufFile::get_string_array(const std::string& key) const {
  EXL3_ASSIGN_OR_RETURN(const GgufValue* v, require(key));
  if (v->type != GgufValueType::kArray || v->elem_type != GgufValueType::kString) {
    return error(absl::StrCat("metadata '", key, "' must be an array of string, not ", v->type_name()));
  }
  std::vector<std::string> out;
  out.reserve(v->items.size());
  for (const GgufValue& item : v->items) out.push_back(item.s);
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::get_int_array(const std::string& key) const {
  EXL3_ASSIGN_OR_RETURN(const GgufValue* v, require(key));
  if (v->type != GgufValueType::kArray) return error(absl::StrCat("metadata '", key, "' must be an array, not ", v->type_name()));
  std::vector<int64_t> out;
  out.reserve(v->size());
  for (uint64_t k = 0; k < v->size(); ++k) {
    const GgufValue item = v->item(k);
    const auto x = item.as_int();
    if (!x) return error(absl::StrCat("metadata '", key, "'[", k, "] must be an integer, not ", item.type_name()));
    out.push_back(*x);
  }
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::get_number_array(const std::string& key) const {
  EXL3_ASSIGN_OR_RETURN(const GgufValue* v, require(key));
  if (v->type != GgufValueType::kArray) return error(absl::StrCat("metadata '", key, "' must be an array, not ", v->type_name()));
  std::vector<double> out;
  out.reserve(v->size());
  for (uint64_t k = 0; k < v->size(); ++k) {
    const GgufValue item = v->item(k);
    const auto x = item.as_number();
    if (!x) return error(absl::StrCat("metadata '", key, "'[", k, "] must be a number, not ", item.type_name()));
    out.push_back(*x);
  }
  return out;
}

}  // namespace exl3
