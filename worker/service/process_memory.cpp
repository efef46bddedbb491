// /proc readers for process and host memory.
#include "worker/service/process_memory.h"

#include <unistd.h>

#include <fstream>
#include <string>

namespace exl3 {
namespace {

int64_t meminfo_field(const std::string& field) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  int64_t kib = 0;
  std::string unit;
  while (in >> name >> kib >> unit) {
    if (name == field + ":") return kib * 1024;
  }
  return 0;
}

}  // namespace

int64_t resident_bytes() {
  std::ifstream in("/proc/self/statm");
  int64_t pages_total = 0, pages_resident = 0;
  if (!(in >> pages_total >> pages_resident)) return 0;
  return pages_resident * sysconf(_SC_PAGESIZE);
}

int64_t available_ram_bytes() { return meminfo_field("MemAvailable"); }
int64_t total_ram_bytes() { return meminfo_field("MemTotal"); }

}  // namespace exl3
