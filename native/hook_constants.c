// Per-thread buffer of dispatch push constants. See hook_constants.h.

#include "hook_constants.h"

#include <string.h>

int tl_constants_append(tl_constants_buffer_t* buffer, const tl_constants_entry_t* entry,
                        const uint32_t* values) {
  uint32_t used = atomic_load_explicit(&buffer->used, memory_order_relaxed);
  size_t size = sizeof(*entry) + (size_t)entry->stored * sizeof(uint32_t);
  if (used + size > TL_CONSTANTS_BUFFER_BYTES) return -1;
  memcpy(buffer->bytes + used, entry, sizeof(*entry));
  memcpy(buffer->bytes + used + sizeof(*entry), values, (size_t)entry->stored * sizeof(uint32_t));
  atomic_store_explicit(&buffer->used, used + (uint32_t)size, memory_order_release);
  return 0;
}
