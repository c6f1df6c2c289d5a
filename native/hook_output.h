// The hook's record file: <TRACELINK_HOOK_OUTPUT>/hook-<pid>.tlhk, one per process.
//
// Little-endian. A 16-byte preamble, then chunks appended as the run goes, so a
// process that dies early still leaves every chunk written so far readable:
//
//   preamble: char magic[8] = "TLHOOK\0\0"; u32 format_version (= 1); u32 zero
//   chunk:    u32 tag; u32 payload_length; u8 payload[payload_length]
//
// Chunks (payload layouts):
//   HEADER  u32 pid; u32 event_count; u32 record_size; u32 max_exports;
//           u32 clock (1: ticks are TSC ticks, 0: ticks are CLOCK_MONOTONIC ns); u32 zero;
//           u64 origin_ticks, u64 origin_ns (the clocks when the hook loaded);
//           u64 skip_ns (IREE_HOOK_SKIP_START_MS); then event_count NUL-terminated
//           event names, then the NUL-terminated filter glob ("" when none).
//   EXPORT  u32 export_id (UINT32_MAX when not hooked); u32 ordinal in its library;
//           u32 flags (bit 0: hooked); u32 library ABI version;
//           NUL-terminated library name; NUL-terminated export name.
//   THREAD  u32 thread index; i32 tid; NUL-terminated thread name.
//   RECORDS u64 ticks, u64 ns (both clocks when the chunk was written: with the
//           header's pair they convert ticks to ns), then record_size-byte records
//           (tl_record_t then event_count u64 counter deltas, UINT64_MAX when a
//           counter could not be read).
//   NOTICE  u32 kind (tl_notice_kind_t); u32 value; NUL-terminated text.
//   CONSTANTS  entries back to back, one per dispatch: tl_constants_entry_t then
//           `stored` u32 push constant values (hook_constants.h).
//   END     u64 ticks, u64 ns (a last clock pair); u64 thread_count. Only after a
//           clean exit.

#ifndef TRACELINK_HOOK_OUTPUT_H_
#define TRACELINK_HOOK_OUTPUT_H_

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define TL_FORMAT_VERSION 1u

typedef enum tl_chunk_tag_t {
  TL_CHUNK_HEADER = 1,
  TL_CHUNK_EXPORT = 2,
  TL_CHUNK_THREAD = 3,
  TL_CHUNK_RECORDS = 4,
  TL_CHUNK_NOTICE = 5,
  TL_CHUNK_END = 6,
  TL_CHUNK_CONSTANTS = 7,
} tl_chunk_tag_t;

typedef enum tl_notice_kind_t {
  TL_NOTICE_UNSUPPORTED_ABI = 1,  // value: library ABI version; text: library name
  TL_NOTICE_EXPORT_LIMIT = 2,     // value: limit; text: first export left unhooked
  TL_NOTICE_QUERY_LIMIT = 3,      // value: limit; libraries past it run unhooked
  TL_NOTICE_EVENT_DROPPED = 4,    // text: "event: reason"
  TL_NOTICE_SIGNAL = 5,           // value: signal that ended the process
  TL_NOTICE_CONFIG_ERROR = 6,     // text: the error; the process exited with status 2
  TL_NOTICE_COUNTER_FAILED = 7,   // value: thread index; some counters missing there
  TL_NOTICE_FAULT_IN_EXPORT = 8,  // value: export id whose workgroup call took SIGSEGV/SIGBUS/SIGFPE/SIGILL
} tl_notice_kind_t;

// One workgroup call. Followed in the file by the counter deltas.
typedef struct tl_record_t {
  // Which dispatch: the address of the dispatch's binding table, shared by all its
  // workgroups (see tl_dispatch in hook.c). Reused by later dispatches only after
  // this one completed, so tracelink groups a key's calls, in start order, into
  // dispatches of workgroup_count calls each.
  uint64_t dispatch_key;
  uint64_t start_ticks;     // at the call (see the clock in HEADER)
  uint64_t duration_ticks;  // wall time of the call
  uint32_t export_id;
  uint32_t thread;  // thread index (THREAD chunk)
  uint32_t workgroup_id_x;
  uint32_t workgroup_id_y;
  uint32_t workgroup_count_x;
  uint32_t workgroup_count_y;
  uint16_t workgroup_id_z;
  uint16_t workgroup_count_z;
  int32_t cpu;  // sched_getcpu() at the start of the call
} tl_record_t;
_Static_assert(sizeof(tl_record_t) == 56, "record layout is part of the file format");

// Creates |path| (truncating) and writes the preamble. Returns the fd or -1 (errno set).
int tl_output_create(const char* path);

// Writes one chunk made of |part_count| pieces with a single writev where possible.
// Async-signal-safe. Returns 0 or -1.
int tl_output_chunk(int fd, tl_chunk_tag_t tag, const struct iovec* parts, int part_count);

#endif  // TRACELINK_HOOK_OUTPUT_H_
