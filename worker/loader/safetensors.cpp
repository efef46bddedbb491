// safetensors parsing with bounds checks; every error names the file and, where known, the tensor.
#include "worker/loader/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit is 100 MB

absl::Status file_error(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::StatusOr<TensorInfo> parse_entry(const std::string& path, const std::string& name,
                                       const json& entry, uint64_t data_size) {
  auto bad = [&](const std::string& what) { return file_error(path, absl::StrCat("tensor \"", name, "\": ", what)); };
  if (!entry.is_object()) return bad("header entry is not an object");
  if (!entry.contains("dtype") || !entry["dtype"].is_string()) return bad("missing dtype");
  if (!entry.contains("shape") || !entry["shape"].is_array()) return bad("missing shape");
  if (!entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
      entry["data_offsets"].size() != 2) {
    return bad("data_offsets must be [begin, end]");
  }
  TensorInfo info;
  info.name = name;
  auto dtype = dtype_from_name(entry["dtype"].get<std::string>());
  if (!dtype.ok()) return bad(std::string(dtype.status().message()));
  info.dtype = *dtype;
  uint64_t numel = 1;
  for (const json& d : entry["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) return bad("shape entries must be non-negative integers");
    const uint64_t v = d.get<uint64_t>();
    if (v != 0 && numel > (1ull << 62) / dtype_size(info.dtype) / v) return bad("shape overflows");
    numel *= v;
    info.shape.push_back(static_cast<int64_t>(v));
  }
  for (const json& o : entry["data_offsets"]) {
    if (!o.is_number_integer() || o.get<int64_t>() < 0) return bad("data_offsets must be non-negative integers");
  }
  info.begin = entry["data_offsets"][0].get<uint64_t>();
  info.end = entry["data_offsets"][1].get<uint64_t>();
  if (info.begin > info.end) return bad("data_offsets begin > end");
  if (info.end > data_size) {
    return bad(absl::StrCat("data_offsets [", info.begin, ", ", info.end, ") run past the end of the data (",
                            data_size, " bytes; file truncated?)"));
  }
  const uint64_t expected = numel * dtype_size(info.dtype);
  if (info.end - info.begin != expected) {
    return bad(absl::StrCat("holds ", info.end - info.begin, " bytes but ", dtype_name(info.dtype), " ",
                            shape_string(info.shape), " needs ", expected));
  }
  return info;
}

}  // namespace

SafetensorsFile::~SafetensorsFile() = default;

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": cannot open (", std::strerror(errno), ")"));
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return file_error(path, "cannot stat");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return file_error(path, absl::StrCat("file is ", size, " bytes, too short for a safetensors header"));
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) return file_error(path, absl::StrCat("mmap failed (", std::strerror(errno), ")"));
  std::shared_ptr<const void> mapping(map, [size](const void* p) { munmap(const_cast<void*>(p), size); });

  const auto* bytes = static_cast<const uint8_t*>(map);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > kMaxHeaderBytes || header_len > size - 8) {
    return file_error(path, absl::StrCat("header length ", header_len, " exceeds the file size ", size,
                                         " (truncated or not a safetensors file)"));
  }
  json header = json::parse(bytes + 8, bytes + 8 + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return file_error(path, "header is not a JSON object");

  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = mapping;
  file->data_ = bytes + 8 + header_len;
  file->data_size_ = size - 8 - header_len;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it.value().is_object()) return file_error(path, "__metadata__ is not an object");
      for (auto m = it.value().begin(); m != it.value().end(); ++m) {
        if (m.value().is_string()) file->metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    EXL3_ASSIGN_OR_RETURN(TensorInfo info, parse_entry(path, it.key(), it.value(), file->data_size_));
    file->tensors_.emplace(it.key(), std::move(info));
  }
  return file;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

absl::StatusOr<Tensor> SafetensorsFile::get(const std::string& name) const {
  const TensorInfo* info = find(name);
  if (info == nullptr) return absl::NotFoundError(absl::StrCat(path_, ": no tensor \"", name, "\""));
  const uint8_t* p = data_ + info->begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(info->dtype) != 0) {
    // Misaligned data (legal in the format): copy into aligned storage.
    Tensor t = Tensor::zeros(info->dtype, info->shape);
    std::memcpy(t.mutable_raw(), p, t.nbytes());
    return t;
  }
  return Tensor::view(info->dtype, info->shape, p, mapping_);
}

absl::StatusOr<SafetensorsCollection> SafetensorsCollection::open_file(const std::string& path) {
  SafetensorsCollection c;
  EXL3_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(path));
  for (const auto& [name, info] : f->tensors()) c.where_[name] = 0;
  c.files_.push_back(std::move(f));
  return c;
}

absl::StatusOr<SafetensorsCollection> SafetensorsCollection::open_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return absl::NotFoundError(absl::StrCat(dir, ": not a directory"));
  std::vector<std::string> paths;
  json weight_map;
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    json index = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") ||
        !index["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": not a valid index (needs a weight_map object)"));
    }
    weight_map = index["weight_map"];
    for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
      if (!it.value().is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(index_path.string(), ": weight_map[\"", it.key(), "\"] is not a file name"));
      }
      const std::string f = (fs::path(dir) / it.value().get<std::string>()).string();
      if (std::find(paths.begin(), paths.end(), f) == paths.end()) paths.push_back(f);
    }
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.is_regular_file() && e.path().extension() == ".safetensors") paths.push_back(e.path().string());
    }
    std::sort(paths.begin(), paths.end());
  }
  if (paths.empty()) return absl::NotFoundError(absl::StrCat(dir, ": no *.safetensors files"));

  SafetensorsCollection c;
  for (const std::string& p : paths) {
    EXL3_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(p));
    for (const auto& [name, info] : f->tensors()) {
      if (c.where_.count(name)) {
        return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" appears in both ",
                                                       c.files_[c.where_[name]]->path(), " and ", p));
      }
      c.where_[name] = c.files_.size();
    }
    c.files_.push_back(std::move(f));
  }
  for (auto it = weight_map.begin(); it != weight_map.end(); ++it) {
    if (c.file_of(it.key()) != (fs::path(dir) / it.value().get<std::string>()).string()) {
      return absl::InvalidArgumentError(absl::StrCat(index_path.string(), " lists tensor \"", it.key(), "\" in ",
                                                     it.value().get<std::string>(), " but that file does not hold it"));
    }
  }
  return c;
}

const TensorInfo* SafetensorsCollection::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : files_[it->second]->find(name);
}

absl::StatusOr<Tensor> SafetensorsCollection::get(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return absl::NotFoundError(absl::StrCat("missing tensor \"", name, "\""));
  return files_[it->second]->get(name);
}

absl::StatusOr<Tensor> SafetensorsCollection::get_checked(const std::string& name, DType dtype,
                                                          const Shape& shape) const {
  EXL3_ASSIGN_OR_RETURN(Tensor t, get(name));
  if (t.dtype() != dtype || t.shape() != shape) {
    return absl::InvalidArgumentError(absl::StrCat(file_of(name), ": tensor \"", name, "\" is ", dtype_name(t.dtype()),
                                                   " ", shape_string(t.shape()), ", expected ", dtype_name(dtype), " ",
                                                   shape_string(shape)));
  }
  return t;
}

std::vector<std::string> SafetensorsCollection::names() const {
  std::vector<std::string> out;
  for (const auto& [name, idx] : where_) out.push_back(name);
  return out;
}

std::string SafetensorsCollection::file_of(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? std::string("(no file)") : files_[it->second]->path();
}

absl::Status write_safetensors(const std::string& path, const std::map<std::string, Tensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    EXL3_CHECK(t.defined(), "write_safetensors: tensor \"", name, "\" is undefined");
    header[name] = {{"dtype", std::string(dtype_name(t.dtype()))},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(h.size()) >> (8 * i));
  out.write(reinterpret_cast<const char*>(len), 8);
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  for (const auto& [name, t] : tensors) {
    out.write(static_cast<const char*>(t.raw()), static_cast<std::streamsize>(t.nbytes()));
  }
  out.close();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace exl3
