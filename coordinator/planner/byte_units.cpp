// Byte formatting and GiB conversion for the shard planner.
#include "coordinator/planner/byte_units.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace exl3 {

uint64_t gib_to_bytes(double gib) {
  if (!(gib > 0.0)) return 0;
  return static_cast<uint64_t>(std::floor(gib * static_cast<double>(kGiB)));
}

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= kGiB) return absl::StrFormat("%.2f GiB", b / static_cast<double>(kGiB));
  return absl::StrFormat("%.2f MiB", b / static_cast<double>(kMiB));
}

}  // namespace exl3
