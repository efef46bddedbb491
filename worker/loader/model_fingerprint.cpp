// Model directory fingerprints (model_fingerprint.h).
#include "worker/loader/model_fingerprint.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace exl3 {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;
constexpr uint64_t kFnvPrime = 1099511628211ull;
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // as the safetensors reader allows

uint64_t fnv1a(const std::string& bytes, uint64_t h = kFnvOffset) {
  for (unsigned char c : bytes) h = (h ^ c) * kFnvPrime;
  return h;
}

absl::StatusOr<std::string> read_prefix(const std::filesystem::path& path, uint64_t count) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(path.string(), ": cannot open"));
  std::string bytes(count, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(count));
  if (static_cast<uint64_t>(in.gcount()) != count) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": shorter than ", count, " bytes"));
  }
  return bytes;
}

bool fingerprinted(const std::string& name) {
  return name == "config.json" || name == "model.safetensors.index.json" ||
         (name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0);
}

}  // namespace

absl::StatusOr<std::vector<ModelFileFingerprint>> fingerprint_model(const std::string& dir) {
  std::error_code ec;
  std::vector<ModelFileFingerprint> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!fingerprinted(name)) continue;
    ModelFileFingerprint f;
    f.name = name;
    f.bytes = std::filesystem::file_size(entry.path(), ec);
    if (ec) return absl::InvalidArgumentError(absl::StrCat(entry.path().string(), ": ", ec.message()));
    if (name.ends_with(".json")) {
      absl::StatusOr<std::string> text = read_prefix(entry.path(), f.bytes);
      if (!text.ok()) return text.status();
      f.hash = fnv1a(*text);
    } else {
      absl::StatusOr<std::string> prefix = read_prefix(entry.path(), 8);
      if (!prefix.ok()) return prefix.status();
      uint64_t header = 0;
      std::memcpy(&header, prefix->data(), sizeof(header));  // little-endian, as the format says
      if (header > kMaxHeaderBytes || header > f.bytes - 8) {
        return absl::InvalidArgumentError(absl::StrCat(entry.path().string(), ": header length ", header,
                                                       " does not fit the file (", f.bytes, " bytes)"));
      }
      absl::StatusOr<std::string> head = read_prefix(entry.path(), 8 + header);
      if (!head.ok()) return head.status();
      f.hash = fnv1a(*head);
    }
    out.push_back(std::move(f));
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat(dir, ": ", ec.message()));
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

std::string fingerprint_difference(const std::vector<ModelFileFingerprint>& reference,
                                   const std::vector<ModelFileFingerprint>& copy) {
  std::map<std::string, const ModelFileFingerprint*> theirs;
  for (const ModelFileFingerprint& f : copy) theirs[f.name] = &f;
  for (const ModelFileFingerprint& f : reference) {
    auto it = theirs.find(f.name);
    if (it == theirs.end()) return absl::StrCat("file ", f.name, " is missing");
    const ModelFileFingerprint& c = *it->second;
    if (c.bytes != f.bytes) return absl::StrCat("file ", f.name, " has ", c.bytes, " bytes, expected ", f.bytes);
    if (c.hash != f.hash) {
      return absl::StrFormat("file %s differs (%s hash %016x, expected %016x)", f.name,
                             f.name.ends_with(".json") ? "content" : "header", c.hash, f.hash);
    }
    theirs.erase(it);
  }
  if (!theirs.empty()) return absl::StrCat("file ", theirs.begin()->first, " is not in the coordinator's copy");
  return "";
}

}  // namespace exl3
