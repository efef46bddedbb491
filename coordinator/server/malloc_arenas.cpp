// Malloc arena cap of the coordinator process (malloc_arenas.h).
#include "coordinator/server/malloc_arenas.h"

#include <malloc.h>

namespace exl3 {

void limit_malloc_arenas() { mallopt(M_ARENA_MAX, 2); }

}  // namespace exl3
