// Memory facts of the worker process and host: resident set size and available RAM (Linux /proc).
#pragma once

#include <cstdint>

namespace exl3 {

// Resident memory of this process in bytes (0 if unknown).
int64_t resident_bytes();
// MemAvailable of the host in bytes (0 if unknown).
int64_t available_ram_bytes();
// MemTotal of the host in bytes (0 if unknown).
int64_t total_ram_bytes();

}  // namespace exl3
