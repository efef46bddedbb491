// Parallel generate-and-pwrite of safetensors files (see safetensors_stream_writer.h).
#include "bench/safetensors_stream_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/check.h"
#include "nlohmann/json.hpp"

namespace exl3 {
namespace {

// One chunk of one tensor: the unit of work of the pool.
struct WriteJob {
  size_t file = 0;
  const StreamTensor* tensor = nullptr;
  uint64_t chunk = 0;
  uint64_t file_offset = 0;
  uint64_t size = 0;
};

absl::Status errno_error(const std::string& path, const std::string& what, int err) {
  const std::string msg = absl::StrCat(path, ": ", what, " (", std::strerror(err), ")");
  if (err == ENOSPC || err == EDQUOT) return absl::ResourceExhaustedError(msg);
  if (err == EACCES || err == EPERM || err == EROFS) return absl::PermissionDeniedError(msg);
  return absl::DataLossError(msg);
}

absl::Status pwrite_all(int fd, const std::string& path, const uint8_t* data, uint64_t size, uint64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pwrite(fd, data, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error(path, absl::StrCat("write of ", size, " bytes at offset ", offset, " failed"), errno);
    }
    data += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

// Opens `path`, reserves `size` bytes and writes the 8-byte length and the header.
absl::StatusOr<int> create_file(const std::string& path, const SafetensorsLayout& layout) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_error(path, "cannot create", errno);
  const off_t size = static_cast<off_t>(layout.file_bytes);
  if (::fallocate(fd, 0, 0, size) != 0) {
    const int err = errno;
    // Filesystems without fallocate (tmpfs supports it; some network filesystems do not) get a
    // sparse file of the right size instead.
    if (err != EOPNOTSUPP && err != ENOSYS) {
      ::close(fd);
      return errno_error(path, absl::StrCat("cannot reserve ", layout.file_bytes, " bytes"), err);
    }
    if (::ftruncate(fd, size) != 0) {
      const int err2 = errno;
      ::close(fd);
      return errno_error(path, "cannot set the file size", err2);
    }
  }
  std::string head(8, '\0');
  const uint64_t len = layout.header.size();
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((len >> (8 * i)) & 0xFF);
  head += layout.header;
  absl::Status st = pwrite_all(fd, path, reinterpret_cast<const uint8_t*>(head.data()), head.size(), 0);
  if (!st.ok()) {
    ::close(fd);
    return st;
  }
  return fd;
}

}  // namespace

uint64_t StreamTensor::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t StreamFile::data_bytes() const {
  uint64_t n = 0;
  for (const StreamTensor& t : tensors) n += t.nbytes();
  return n;
}

SafetensorsLayout plan_safetensors_layout(const std::vector<StreamTensor>& tensors) {
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto key = [&](size_t i) {
    const StreamTensor& t = tensors[i];
    const bool whole = t.nbytes() % 64 == 0;
    return std::tuple<int, size_t, const std::string&>(whole ? 0 : 1, whole ? 0 : SIZE_MAX - dtype_size(t.dtype), t.name);
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });

  SafetensorsLayout layout;
  layout.offsets.assign(tensors.size(), 0);
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (size_t i : order) {
    const StreamTensor& t = tensors[i];
    EXL3_CHECK(!header.contains(t.name), "safetensors layout: tensor \"", t.name, "\" listed twice");
    layout.offsets[i] = offset;
    header[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  layout.header = header.dump();
  while ((8 + layout.header.size()) % 8 != 0) layout.header.push_back(' ');
  layout.data_bytes = offset;
  layout.file_bytes = 8 + layout.header.size() + offset;
  return layout;
}

absl::Status write_stream_files(const std::vector<StreamFile>& files, const StreamWriteOptions& options) {
  EXL3_CHECK(options.threads >= 1, "write_stream_files: threads must be >= 1");
  std::vector<int> fds;
  auto close_all = [&fds]() {
    for (int fd : fds) ::close(fd);
    fds.clear();
  };
  std::vector<WriteJob> jobs;
  uint64_t total = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const SafetensorsLayout layout = plan_safetensors_layout(files[f].tensors);
    absl::StatusOr<int> fd = create_file(files[f].path, layout);
    if (!fd.ok()) {
      close_all();
      return fd.status();
    }
    fds.push_back(*fd);
    const uint64_t data_start = 8 + layout.header.size();
    for (size_t t = 0; t < files[f].tensors.size(); ++t) {
      const StreamTensor& tensor = files[f].tensors[t];
      const uint64_t bytes = tensor.nbytes();
      for (uint64_t c = 0; c * kFillChunkBytes < bytes; ++c) {
        const uint64_t begin = c * kFillChunkBytes;
        jobs.push_back({f, &tensor, c, data_start + layout.offsets[t] + begin, std::min(kFillChunkBytes, bytes - begin)});
      }
      total += bytes;
    }
  }

  std::atomic<size_t> next{0};
  std::atomic<uint64_t> done{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::condition_variable cv;
  absl::Status first_error;
  int running = std::min<int>(options.threads, static_cast<int>(std::max<size_t>(jobs.size(), 1)));
  auto worker = [&]() {
    std::unique_ptr<uint8_t[]> buffer(new uint8_t[kFillChunkBytes]);
    for (size_t j = next++; j < jobs.size() && !failed; j = next++) {
      const WriteJob& job = jobs[j];
      fill_chunk(job.tensor->fill, options.seed, job.chunk, buffer.get(), job.size);
      absl::Status st = pwrite_all(fds[job.file], files[job.file].path, buffer.get(), job.size, job.file_offset);
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.ok()) first_error = st;
        failed = true;
        break;
      }
      done += job.size;
    }
    std::lock_guard<std::mutex> lock(mu);
    --running;
    cv.notify_all();
  };
  std::vector<std::thread> threads;
  for (int i = 0, n = running; i < n; ++i) threads.emplace_back(worker);
  {
    std::unique_lock<std::mutex> lock(mu);
    const auto interval = std::chrono::duration<double>(options.progress_interval_s);
    while (!cv.wait_for(lock, interval, [&] { return running == 0; })) {
      if (options.progress) {
        lock.unlock();
        options.progress(done.load(), total);
        lock.lock();
      }
    }
  }
  for (std::thread& t : threads) t.join();
  if (first_error.ok()) {
    for (size_t f = 0; f < fds.size(); ++f) {
      if (::close(fds[f]) != 0 && first_error.ok()) first_error = errno_error(files[f].path, "close failed", errno);
    }
    fds.clear();
  }
  close_all();
  if (options.progress && first_error.ok()) options.progress(done.load(), total);
  return first_error;
}

}  // namespace exl3
