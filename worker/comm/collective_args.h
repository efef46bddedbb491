// Argument checks every Communicator backend makes before it sends anything: a wrong peer or root
// is INVALID_ARGUMENT on this rank alone, and the communicator stays usable.
#pragma once

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

}  // namespace exl3
