// The coordinator process's allocator setting. gRPC's synchronous server runs every stream on a
// handler thread, and under many concurrent streams with cancellations those threads come and go;
// glibc gives new threads new malloc arenas (up to 8 per core), and the process's resident memory
// crept up under a 64-stream soak (+5.4% over 440 s, back to its size when the load stopped). Two
// arenas hold it flat; the coordinator's allocations are small and not contended enough to need more.
#pragma once

namespace exl3 {

// Caps glibc's malloc arenas for this process; call first thing in main, before threads start.
void limit_malloc_arenas();

}  // namespace exl3
