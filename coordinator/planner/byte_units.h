// Byte counts for people: --split GiB values to bytes, and bytes to "12.34 GiB" / "56.78 MiB" in
// plan tables and planner errors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace exl3 {

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

// GiB (binary, as --split is documented) to bytes, rounded down; negative values give 0.
uint64_t gib_to_bytes(double gib);

// A comma-separated list of non-negative GiB amounts (the --split flag), e.g. "20,24.5".
// INVALID_ARGUMENT naming the first entry that is not one.
absl::StatusOr<std::vector<double>> parse_gib_list(const std::string& text);

// Two decimals in GiB from 1 GiB up, else in MiB (so small fixture models stay readable):
// "3.20 GiB", "12.50 MiB", "0.00 MiB".
std::string format_bytes(uint64_t bytes);

}  // namespace exl3
