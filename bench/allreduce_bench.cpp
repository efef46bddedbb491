// exl3-allreduce-bench: latency and bus bandwidth of the Gloo all-reduce between N ranks, run as
// N threads of one process on loopback TCP (the CPU workers' collective). busbw follows the
// nccl-tests convention for all-reduce: bytes * 2 * (N - 1) / N / time.
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "worker/comm/gloo_communicator.h"
#include "worker/comm/in_memory_store.h"

int main(int argc, char** argv) {
  int ranks = 2, iters = 200;
  std::vector<int64_t> sizes = {512, 4096, 65536, 1 << 20};
  CLI::App app{"exl3-allreduce-bench: Gloo all-reduce latency and bandwidth between N in-process ranks"};
  app.add_option("--ranks", ranks, "Number of ranks (threads)")->check(CLI::Range(2, 16))->capture_default_str();
  app.add_option("--iters", iters, "Timed iterations per size (after 10 warm-up ones)")->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--sizes", sizes, "Element counts (fp32) to measure");
  CLI11_PARSE(app, argc, argv);

  exl3::InMemoryStore store;
  std::vector<std::unique_ptr<exl3::Communicator>> comms(ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      exl3::GlooOptions o;
      o.rank = r;
      o.world_size = ranks;
      o.prefix = "bench";
      auto c = exl3::make_gloo_communicator(o, store);
      if (!c.ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, std::string(c.status().message()).c_str());
        std::exit(1);
      }
      comms[r] = *std::move(c);
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();

  std::printf("%12s %12s %12s %12s\n", "elements", "bytes", "time (us)", "busbw (GB/s)");
  for (int64_t n : sizes) {
    std::vector<double> seconds(ranks);
    for (int r = 0; r < ranks; ++r) {
      threads.emplace_back([&, r] {
        std::vector<float> data(n, static_cast<float>(r));
        for (int i = 0; i < 10; ++i) (void)comms[r]->all_reduce_sum(data);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
          const absl::Status s = comms[r]->all_reduce_sum(data);
          if (!s.ok()) {
            std::fprintf(stderr, "rank %d: %s\n", r, std::string(s.message()).c_str());
            std::exit(1);
          }
        }
        seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
      });
    }
    for (auto& t : threads) t.join();
    threads.clear();
    const double t = seconds[0];
    const double bytes = static_cast<double>(n) * sizeof(float);
    std::printf("%12lld %12.0f %12.1f %12.3f\n", static_cast<long long>(n), bytes, t * 1e6,
                bytes * 2.0 * (ranks - 1) / ranks / t / 1e9);
  }
  return 0;
}
