// perf_event_open counters for the hook. See hook_events.h.

#define _GNU_SOURCE
#include "hook_events.h"

#include <errno.h>
#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef struct tl_event_def_t {
  const char* name;
  uint32_t type;
  uint64_t config;
  const char* help;
} tl_event_def_t;

#define TL_HW_CACHE(cache, result) \
  ((cache) | (PERF_COUNT_HW_CACHE_OP_READ << 8) | ((uint64_t)(result) << 16))

static const tl_event_def_t kEventDefs[] = {
    {"task-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, "CPU time of the thread (ns) [software]"},
    {"cpu-clock", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, "CPU clock (ns) [software]"},
    {"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, "page faults [software]"},
    {"faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, "alias of page-faults [software]"},
    {"minor-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MIN, "minor page faults [software]"},
    {"major-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ, "major page faults [software]"},
    {"context-switches", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, "context switches [software]"},
    {"cs", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, "alias of context-switches [software]"},
    {"cpu-migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, "migrations to another CPU [software]"},
    {"migrations", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_MIGRATIONS, "alias of cpu-migrations [software]"},
    {"alignment-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_ALIGNMENT_FAULTS, "alignment faults [software]"},
    {"emulation-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_EMULATION_FAULTS, "emulation faults [software]"},
    {"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, "CPU cycles [hardware]"},
    {"cpu-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, "alias of cycles [hardware]"},
    {"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, "retired instructions [hardware]"},
    {"cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES, "last-level cache references [hardware]"},
    {"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, "last-level cache misses [hardware]"},
    {"branches", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS, "retired branches [hardware]"},
    {"branch-instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_INSTRUCTIONS, "alias of branches [hardware]"},
    {"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES, "mispredicted branches [hardware]"},
    {"bus-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BUS_CYCLES, "bus cycles [hardware]"},
    {"ref-cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_REF_CPU_CYCLES, "reference cycles, unscaled by frequency [hardware]"},
    {"stalled-cycles-frontend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, "frontend stall cycles [hardware]"},
    {"stalled-cycles-backend", PERF_TYPE_HARDWARE, PERF_COUNT_HW_STALLED_CYCLES_BACKEND, "backend stall cycles [hardware]"},
    {"L1-dcache-loads", PERF_TYPE_HW_CACHE, TL_HW_CACHE(PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_RESULT_ACCESS), "L1 data cache loads [hardware]"},
    {"L1-dcache-load-misses", PERF_TYPE_HW_CACHE, TL_HW_CACHE(PERF_COUNT_HW_CACHE_L1D, PERF_COUNT_HW_CACHE_RESULT_MISS), "L1 data cache load misses [hardware]"},
    {"LLC-loads", PERF_TYPE_HW_CACHE, TL_HW_CACHE(PERF_COUNT_HW_CACHE_LL, PERF_COUNT_HW_CACHE_RESULT_ACCESS), "last-level cache loads [hardware]"},
    {"LLC-load-misses", PERF_TYPE_HW_CACHE, TL_HW_CACHE(PERF_COUNT_HW_CACHE_LL, PERF_COUNT_HW_CACHE_RESULT_MISS), "last-level cache load misses [hardware]"},
    {"dTLB-loads", PERF_TYPE_HW_CACHE, TL_HW_CACHE(PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_RESULT_ACCESS), "data TLB loads [hardware]"},
    {"dTLB-load-misses", PERF_TYPE_HW_CACHE, TL_HW_CACHE(PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_RESULT_MISS), "data TLB load misses [hardware]"},
};
#define TL_EVENT_DEF_COUNT (sizeof(kEventDefs) / sizeof(kEventDefs[0]))

// Raw events: "r" followed by 1-16 hex digits, the CPU-specific event code as
// `perf stat -e rNNN` takes it.
static int tl_parse_raw(const char* name, uint64_t* config) {
  size_t length = strlen(name);
  if (length < 2 || length > 17 || name[0] != 'r') return 0;
  for (size_t i = 1; i < length; ++i) {
    if (!strchr("0123456789abcdefABCDEF", name[i])) return 0;
  }
  *config = strtoull(name + 1, NULL, 16);
  return 1;
}

static int tl_resolve(const char* name, tl_event_t* event) {
  for (size_t i = 0; i < TL_EVENT_DEF_COUNT; ++i) {
    if (strcmp(name, kEventDefs[i].name) == 0) {
      event->type = kEventDefs[i].type;
      event->config = kEventDefs[i].config;
      return 1;
    }
  }
  if (tl_parse_raw(name, &event->config)) {
    event->type = PERF_TYPE_RAW;
    return 1;
  }
  return 0;
}

int tl_events_parse(const char* list, tl_event_t* events, int* count, char* error,
                    size_t error_size) {
  *count = 0;
  const char* cursor = list;
  while (*cursor) {
    const char* end = strchr(cursor, ',');
    size_t length = end ? (size_t)(end - cursor) : strlen(cursor);
    if (length > 0) {
      if (*count == TL_MAX_EVENTS) {
        snprintf(error, error_size, "too many perf events in IREE_HOOK_PERF_EVENT_TYPES (at most %d)",
                 TL_MAX_EVENTS);
        return -1;
      }
      tl_event_t* event = &events[*count];
      memset(event, 0, sizeof(*event));
      if (length >= sizeof(event->name)) length = sizeof(event->name) - 1;
      memcpy(event->name, cursor, length);
      if (!tl_resolve(event->name, event)) {
        snprintf(error, error_size,
                 "unknown perf event '%s' in IREE_HOOK_PERF_EVENT_TYPES "
                 "(IREE_HOOK_LIST_EVENT_TYPES=1 lists the accepted names)",
                 event->name);
        return -1;
      }
      for (int i = 0; i < *count; ++i) {
        if (strcmp(events[i].name, event->name) == 0) {
          snprintf(error, error_size, "perf event '%s' is listed twice in IREE_HOOK_PERF_EVENT_TYPES",
                   event->name);
          return -1;
        }
      }
      ++*count;
    }
    if (!end) break;
    cursor = end + 1;
  }
  return 0;
}

void tl_events_print_list(FILE* out) {
  fprintf(out, "Event types accepted in IREE_HOOK_PERF_EVENT_TYPES (comma-separated):\n");
  for (size_t i = 0; i < TL_EVENT_DEF_COUNT; ++i) {
    fprintf(out, "  %-26s %s\n", kEventDefs[i].name, kEventDefs[i].help);
  }
  fprintf(out, "  %-26s %s\n", "r<hex>", "raw CPU-specific event code, as in `perf stat -e r<hex>` [hardware]");
  fprintf(out, "Hardware events need a PMU: on most VMs they are unavailable and get dropped with a warning.\n");
}

static int tl_perf_event_open(const tl_event_t* event, int group_fd, int exclude_kernel) {
  struct perf_event_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.size = sizeof(attr);
  attr.type = event->type;
  attr.config = event->config;
  attr.read_format = PERF_FORMAT_GROUP;
  attr.exclude_kernel = exclude_kernel ? 1 : 0;
  attr.exclude_hv = 1;
  // pid 0, cpu -1: this thread on any CPU.
  return (int)syscall(SYS_perf_event_open, &attr, 0, -1, group_fd, PERF_FLAG_FD_CLOEXEC);
}

void tl_events_probe(tl_event_t* events, int* count,
                     void (*on_dropped)(const char* name, const char* reason)) {
  int kept = 0;
  for (int i = 0; i < *count; ++i) {
    tl_event_t* event = &events[i];
    int fd = tl_perf_event_open(event, -1, 0);
    if (fd < 0 && (errno == EACCES || errno == EPERM)) {
      // Unprivileged users may only count user-mode events (perf_event_paranoid).
      fd = tl_perf_event_open(event, -1, 1);
      if (fd >= 0) event->exclude_kernel = 1;
    }
    if (fd >= 0) {
      close(fd);
      if (kept != i) events[kept] = *event;
      ++kept;
      continue;
    }
    char reason[192];
    int error = errno;
    int needs_pmu = event->type != PERF_TYPE_SOFTWARE;
    snprintf(reason, sizeof(reason), "%s%s", strerror(error),
             (error == ENOENT || error == EOPNOTSUPP) && needs_pmu
                 ? ": no hardware PMU for this event on this machine (common on VMs)"
                 : "");
    fprintf(stderr, "tracelink hook: warning: perf event '%s' is unavailable (%s); dropped\n",
            event->name, reason);
    if (on_dropped) on_dropped(event->name, reason);
  }
  *count = kept;
}

static int tl_is_clock(const tl_event_t* event) {
  return event->type == PERF_TYPE_SOFTWARE &&
         (event->config == PERF_COUNT_SW_TASK_CLOCK || event->config == PERF_COUNT_SW_CPU_CLOCK);
}

// task-clock and cpu-clock have their own hrtimer PMUs and are only exact per call
// when read alone: measured on Linux 6.18, as a sibling of any other leader (even
// the other clock) a clock reads 0 or a stale value, and as leader its generic
// software siblings (page-faults, context-switches) read 0 or undercount. So each
// clock is a group of its own and all other events share one group (generic
// software and hardware events group fine, as with `perf stat -e '{..}'`).
int tl_counter_group_open(tl_counter_group_t* group, const tl_event_t* events, int count) {
  int failed = 0;
  group->group_count = 1;  // group 0: everything but the clocks
  for (int g = 0; g < TL_MAX_GROUPS; ++g) {
    group->leader[g] = -1;
    group->open_count[g] = 0;
  }
  for (int i = 0; i < count; ++i) {
    // Parsing rejects duplicates, so there are at most two clocks.
    int g = tl_is_clock(&events[i]) ? group->group_count++ : 0;
    int fd = tl_perf_event_open(&events[i], group->leader[g], events[i].exclude_kernel);
    group->fds[i] = fd;
    group->group[i] = g;
    group->slot[i] = -1;
    if (fd < 0) {
      ++failed;
      continue;
    }
    if (group->leader[g] < 0) group->leader[g] = fd;
    group->slot[i] = group->open_count[g]++;  // values come in the order members joined
  }
  return failed;
}

void tl_counter_group_read(const tl_counter_group_t* group, int count, uint64_t* values) {
  // PERF_FORMAT_GROUP layout: { u64 nr; u64 value[nr]; }
  uint64_t buffer[TL_MAX_GROUPS][1 + TL_MAX_EVENTS];
  int ok[TL_MAX_GROUPS];
  for (int g = 0; g < group->group_count; ++g) {
    ssize_t expected = (ssize_t)((1 + group->open_count[g]) * sizeof(uint64_t));
    ok[g] = group->leader[g] >= 0 && read(group->leader[g], buffer[g], (size_t)expected) == expected;
  }
  for (int i = 0; i < count; ++i) {
    int g = group->group[i];
    values[i] = (ok[g] && group->slot[i] >= 0) ? buffer[g][1 + group->slot[i]] : TL_COUNTER_MISSING;
  }
}

void tl_counter_group_close(tl_counter_group_t* group, int count) {
  for (int i = 0; i < count; ++i) {
    if (group->fds[i] >= 0) close(group->fds[i]);
    group->fds[i] = -1;
  }
  for (int g = 0; g < TL_MAX_GROUPS; ++g) {
    group->leader[g] = -1;
    group->open_count[g] = 0;
  }
  group->group_count = 0;
}
