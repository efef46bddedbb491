// Byte formatting and GiB conversion for the shard planner.
#include "coordinator/planner/byte_units.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace exl3 {

uint64_t gib_to_bytes(double gib) {
  if (!(gib > 0.0)) return 0;
  return static_cast<uint64_t>(std::floor(gib * static_cast<double>(kGiB)));
}

absl::StatusOr<std::vector<double>> parse_gib_list(const std::string& text) {
  std::vector<double> out;
  for (const auto& part : absl::StrSplit(text, ',')) {
    double gib = 0;
    if (!absl::SimpleAtod(part, &gib) || !(gib >= 0) || !std::isfinite(gib)) {
      return absl::InvalidArgumentError(absl::StrCat("--split value \"", std::string(part), "\" is not a GiB amount"));
    }
    out.push_back(gib);
  }
  return out;
}

std::string format_bytes(uint64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= kGiB) return absl::StrFormat("%.2f GiB", b / static_cast<double>(kGiB));
  return absl::StrFormat("%.2f MiB", b / static_cast<double>(kMiB));
}

}  // namespace exl3
