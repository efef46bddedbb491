// How the GPU workers of a tensor-parallel job all-reduce (--all-reduce on exl3-launch and
// exl3-coordinator, LoadShard.all_reduce for the workers): through NCCL alone, or with the parts of
// up to --all-reduce-oneshot-max-kib KiB as one kernel over peer-to-peer memory
// (worker/comm/p2p_all_reduce_communicator.h) and the rest through NCCL. The names, the parsing
// and the help texts both flags share; CPU workers always all-reduce through Gloo.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace exl3 {

enum class AllReduceMode : uint8_t {
  kNccl = 0,     // every collective through NCCL
  kOneshot = 1,  // parts up to the one-shot limit as one P2P kernel, the rest through NCCL
};

// The one-shot limit in KiB: the default and the range P2pAllReduceOptions::max_bytes takes
// (8 bytes .. 64 MiB, so whole KiB from 1 to 65536).
inline constexpr int32_t kAllReduceOneshotDefaultMaxKib = 256;
inline constexpr int32_t kAllReduceOneshotMinKib = 1;
inline constexpr int32_t kAllReduceOneshotMaxKib = 65536;

// "nccl", "oneshot".
std::string all_reduce_mode_name(AllReduceMode mode);
// Parses "nccl" / "oneshot"; INVALID_ARGUMENT naming `flag` and the text otherwise.
absl::StatusOr<AllReduceMode> parse_all_reduce_mode(const std::string& text, const std::string& flag);
// OK for 1..65536; INVALID_ARGUMENT naming `what` (a flag or a proto field) and the value otherwise.
absl::Status validate_all_reduce_oneshot_max_kib(int64_t kib, const std::string& what);

// Help texts of --all-reduce and --all-reduce-oneshot-max-kib.
std::string all_reduce_flag_help();
std::string all_reduce_oneshot_max_kib_flag_help();

}  // namespace exl3
