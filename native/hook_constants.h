// Each dispatch's push constants, recorded once per dispatch: a dispatch with
// dynamic shapes gets its sizes at run time as push constants, and tracelink
// costs it with them. Recorded at the dispatch's workgroup (0, 0, 0), which
// every grid has and which runs exactly once, into a per-thread buffer written
// out with the thread's records (CONSTANTS chunk, see hook_output.h).

#ifndef TRACELINK_HOOK_CONSTANTS_H_
#define TRACELINK_HOOK_CONSTANTS_H_

#include <stdatomic.h>
#include <stdint.h>

// Values kept per dispatch; IREE's local HAL passes far fewer (64 at most in 3.13).
#define TL_MAX_CONSTANTS 1024u
#define TL_CONSTANTS_BUFFER_BYTES (64u * 1024u)

// One dispatch's entry, followed in the buffer (and file) by |stored| u32 values.
typedef struct tl_constants_entry_t {
  uint64_t dispatch_key;  // as in tl_record_t: with start_ticks and export_id it names
  uint64_t start_ticks;   // the workgroup (0, 0, 0) record of the same dispatch
  uint32_t export_id;
  uint16_t count;   // the dispatch's push_constant_count
  uint16_t stored;  // values that follow: min(count, TL_MAX_CONSTANTS)
} tl_constants_entry_t;
_Static_assert(sizeof(tl_constants_entry_t) == 24, "constants entry layout is part of the file format");

// Filled by its owner thread only; |used| is published with release semantics so
// a flush by another thread (at exit, under the hook's lock) sees whole entries.
typedef struct tl_constants_buffer_t {
  _Atomic uint32_t used;  // bytes
  uint8_t* bytes;         // TL_CONSTANTS_BUFFER_BYTES
} tl_constants_buffer_t;

// Appends one entry. Returns 0, or -1 when the buffer has no room (write it out, reset |used|, retry).
int tl_constants_append(tl_constants_buffer_t* buffer, const tl_constants_entry_t* entry,
                        const uint32_t* values);

#endif  // TRACELINK_HOOK_CONSTANTS_H_
