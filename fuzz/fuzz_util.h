// Helpers shared by the fuzzers: an in-memory file for readers that take a path, and the real
// tokenizers that the encode and request fuzzers load once.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "coordinator/tokenizer/tokenizer.h"

namespace exl3::fuzz {

// One memfd, rewritten with each input; path() names it for readers that open files by path.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("exl3-fuzz", 0)) {
    if (fd_ < 0) {
      std::perror("memfd_create");
      std::abort();
    }
  }
  ~MemFile() { close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  void write(const uint8_t* data, size_t size) {
    if (ftruncate(fd_, 0) != 0 || pwrite(fd_, data, size, 0) != static_cast<ssize_t>(size)) {
      std::perror("memfd write");
      std::abort();
    }
  }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

// The readable files named by EXL3_FUZZ_TOKENIZERS (environment, else the build's list; colon
// separated); at least one must exist.
inline std::vector<std::string> tokenizer_paths() {
  const char* env = std::getenv("EXL3_FUZZ_TOKENIZERS");
  const std::string paths = env != nullptr ? env : EXL3_FUZZ_TOKENIZERS;
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= paths.size()) {
    size_t end = paths.find(':', begin);
    if (end == std::string::npos) end = paths.size();
    const std::string path = paths.substr(begin, end - begin);
    begin = end + 1;
    if (!path.empty() && access(path.c_str(), R_OK) == 0) out.push_back(path);
  }
  if (out.empty()) {
    std::fprintf(stderr, "fuzz: no tokenizer found in %s\n", paths.c_str());
    std::abort();
  }
  return out;
}

inline Tokenizer load_tokenizer(const std::string& path) {
  absl::StatusOr<Tokenizer> t = Tokenizer::from_file(path);
  if (!t.ok()) {
    std::fprintf(stderr, "fuzz: cannot load %s: %s\n", path.c_str(), std::string(t.status().message()).c_str());
    std::abort();
  }
  std::fprintf(stderr, "fuzz: loaded %s (vocab %d)\n", path.c_str(), t->vocab_size());
  return *std::move(t);
}

// Every tokenizer of tokenizer_paths(), loaded on first use and kept for the whole run.
inline const std::vector<Tokenizer>& tokenizers() {
  static const std::vector<Tokenizer>* list = [] {
    auto* out = new std::vector<Tokenizer>();
    for (const std::string& path : tokenizer_paths()) out->push_back(load_tokenizer(path));
    return out;
  }();
  return *list;
}

}  // namespace exl3::fuzz
