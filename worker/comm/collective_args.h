// Argument checks every Communicator backend makes before it sends anything: a wrong peer or root
// is INVALID_ARGUMENT on this rank alone, and the communicator stays usable.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace exl3 {

inline absl::Status check_peer(const char* op, int rank, int world_size, int peer) {
  if (peer < 0 || peer >= world_size || peer == rank) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": rank ", rank, " of ", world_size,
                                                   " cannot exchange with rank ", peer));
  }
  return absl::OkStatus();
}

inline absl::Status check_root(int root, int world_size) {
  if (root < 0 || root >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat("broadcast: root ", root, " is outside a world of ", world_size));
  }
  return absl::OkStatus();
}

// all_gather with counts[r] elements from rank r: one count per rank, none negative, this rank
// sending counts[rank] elements and receiving their sum.
inline absl::Status check_all_gather_counts(int rank, int world_size, int64_t sent, int64_t received,
                                            std::span<const int64_t> counts) {
  if (counts.size() != static_cast<size_t>(world_size)) {
    return absl::InvalidArgumentError(absl::StrCat("all_gather: ", counts.size(), " counts for a world of ", world_size));
  }
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("all_gather: negative count ", counts[r], " for rank ", r));
    }
    total += counts[r];
  }
  if (sent != counts[rank]) {
    return absl::InvalidArgumentError(
        absl::StrCat("all_gather: rank ", rank, " sends ", sent, " elements, counts say ", counts[rank]));
  }
  if (received != total) {
    return absl::InvalidArgumentError(
        absl::StrCat("all_gather: recv holds ", received, " elements, counts add up to ", total));
  }
  return absl::OkStatus();
}

}  // namespace exl3
