// Names, parsing and help texts of the all-reduce modes (worker/comm/all_reduce_mode.h).
#include "worker/comm/all_reduce_mode.h"

#include "absl/strings/str_cat.h"

namespace exl3 {

std::string all_reduce_mode_name(AllReduceMode mode) {
  switch (mode) {
    case AllReduceMode::kNccl: return "nccl";
    case AllReduceMode::kOneshot: return "oneshot";
  }
  return absl::StrCat("invalid(", static_cast<int>(mode), ")");
}

absl::StatusOr<AllReduceMode> parse_all_reduce_mode(const std::string& text, const std::string& flag) {
  if (text == "nccl") return AllReduceMode::kNccl;
  if (text == "oneshot") return AllReduceMode::kOneshot;
  return absl::InvalidArgumentError(
      absl::StrCat(flag, " \"", text, "\": expected nccl or oneshot (oneshot: GPU workers on one machine only)"));
}

absl::Status validate_all_reduce_oneshot_max_kib(int64_t kib, const std::string& what) {
  if (kib >= kAllReduceOneshotMinKib && kib <= kAllReduceOneshotMaxKib) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(what, " ", kib, ": expected ", kAllReduceOneshotMinKib, "..",
                                                 kAllReduceOneshotMaxKib,
                                                 " KiB (the largest part that goes one-shot)"));
}

std::string all_reduce_flag_help() {
  return absl::StrCat(
      "how GPU workers all-reduce in tensor parallel: nccl (default) or oneshot (parts up to ",
      kAllReduceOneshotDefaultMaxKib,
      " KiB as one kernel over NVLink/PCIe peer-to-peer memory, the rest through NCCL; all workers on one machine "
      "with peer access)");
}

std::string all_reduce_oneshot_max_kib_flag_help() {
  return absl::StrCat(
      "with --all-reduce oneshot: the largest all-reduce part, in KiB, that goes one-shot (",
      kAllReduceOneshotMinKib, "..", kAllReduceOneshotMaxKib, "); larger parts go through NCCL. Each GPU worker "
      "allocates a receive buffer of 4 x workers x this much (8 MiB at the default with 8 workers), which the plan "
      "prices");
}

}  // namespace exl3
