// Counting perf events around each workgroup call: event names, parsing, and
// per-thread perf_event groups read with one read() each (PERF_FORMAT_GROUP).

#ifndef TRACELINK_HOOK_EVENTS_H_
#define TRACELINK_HOOK_EVENTS_H_

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TL_MAX_EVENTS 16
#define TL_EVENT_NAME_MAX 64
// A counter value that could not be read (its event failed to open in that thread).
#define TL_COUNTER_MISSING UINT64_MAX

typedef struct tl_event_t {
  char name[TL_EVENT_NAME_MAX];  // as the user spelled it (aliases kept)
  uint32_t type;                 // perf_event_attr.type
  uint64_t config;               // perf_event_attr.config
  int exclude_kernel;            // set when the kernel refused kernel-mode counting
} tl_event_t;

// The counters of one thread: perf_event groups, each read with one read()
// (PERF_FORMAT_GROUP): all events except task-clock/cpu-clock share one group,
// and each of those two clocks is a group of its own (see tl_counter_group_open).
// fds[i] is the fd of events[i] or -1; group[i] and slot[i] locate its value.
#define TL_MAX_GROUPS 3
typedef struct tl_counter_group_t {
  int group_count;
  int leader[TL_MAX_GROUPS];
  int open_count[TL_MAX_GROUPS];
  int fds[TL_MAX_EVENTS];
  int group[TL_MAX_EVENTS];
  int slot[TL_MAX_EVENTS];
} tl_counter_group_t;

// Parses a comma-separated list of event names (see tl_events_print_list).
// Returns 0, or -1 with a one-line message in |error|.
int tl_events_parse(const char* list, tl_event_t* events, int* count, char* error,
                    size_t error_size);

// Prints every accepted event name with a short description.
void tl_events_print_list(FILE* out);

// Opens each event once in the calling thread and removes those the kernel refuses
// (e.g. hardware events on a VM without a PMU), warning on stderr for each and
// calling |on_dropped(name, reason)| so the refusal can be recorded.
void tl_events_probe(tl_event_t* events, int* count,
                     void (*on_dropped)(const char* name, const char* reason));

// Opens the groups for the calling thread. Returns the number of events that
// could not be opened (their counters read as TL_COUNTER_MISSING).
int tl_counter_group_open(tl_counter_group_t* group, const tl_event_t* events, int count);

// Reads all counters, one read() per group; missing ones get TL_COUNTER_MISSING.
void tl_counter_group_read(const tl_counter_group_t* group, int count, uint64_t* values);

void tl_counter_group_close(tl_counter_group_t* group, int count);

#endif  // TRACELINK_HOOK_EVENTS_H_
