// tracelink's LD_PRELOAD hook: per-workgroup timing and perf counters for IREE
// executables built as system shared libraries (--iree-llvmcpu-link-embedded=false).
//
// How it gets in: the pip runtime is not built with IREE's library-call hook, but it
// loads system-library executables with dlopen + dlsym("iree_hal_executable_library_query")
// through the PLT. This library interposes dlsym and hands back a wrapper of the query;
// the wrapper returns a heap copy of the library struct (the original lives in RELRO)
// whose export table points at per-export trampolines. The runtime caches those
// pointers right after the query, so every workgroup call goes through tl_dispatch.
// Embedded-ELF executables are loaded by IREE's own linker and never reach dlsym.
//
// Configuration (environment, read once at load):
//   TRACELINK_HOOK_OUTPUT      directory for the record file hook-<pid>.tlhk (required)
//   IREE_HOOK_FILTER_NAME      fnmatch glob over export names; default all
//   IREE_HOOK_SKIP_START_MS    validated and passed on in the header: tracelink drops the
//                              dispatches that started earlier than this after load
//   IREE_HOOK_PERF_EVENT_TYPES comma-separated perf events (see hook_events.c)
//   IREE_HOOK_LIST_EVENT_TYPES print the accepted event names and exit
// The library only records, one record per workgroup call and each dispatch's push
// constants (its dynamic sizes); tracelink groups the calls into dispatches, converts
// timestamps, and computes and prints the statistics.
// A workgroup call that takes a fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL) is named in the
// file before the process dies, so tracelink can say which dispatch crashed a program.
//
// Per-call cost matters (a workgroup can take under a microsecond), so the hot path
// takes no lock and touches no shared cache line: two TSC reads, sched_getcpu, and
// a 56-byte append to a per-thread buffer written out 8192 records at a time.
//
// Limits: 4096 hooked exports and 4096 distinct query functions per process
// (TL_TRAMPOLINE_COUNT); past them exports/libraries run unhooked, with a message.
// Only the calling process is recorded after fork() without exec (the child runs
// unhooked); exec'd children get their own file through LD_PRELOAD.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <x86intrin.h>
#endif

#include "hook_abi.h"
#include "hook_constants.h"
#include "hook_events.h"
#include "hook_output.h"
#include "hook_trampolines.h"

#define TL_PUBLIC __attribute__((visibility("default")))
#define TL_UNLIKELY(x) __builtin_expect(!!(x), 0)

// Records buffered per thread between writes (one write syscall per flush).
#define TL_RECORDS_PER_FLUSH 8192

// No export running on a thread (tl_thread_t.running_export).
#define TL_NO_EXPORT UINT32_MAX

// Each recording thread's signal stack: a dispatch that overflows its stack still
// gets its fault named (the handler cannot run on the overflowed stack).
#define TL_SIGNAL_STACK_BYTES (64 * 1024)

//===----------------------------------------------------------------------===//
// State
//===----------------------------------------------------------------------===//

typedef enum tl_state_t {
  TL_PASSIVE = 0,    // not configured, or no IREE library queried yet
  TL_RECORDING = 1,  // record file open, trampolines live
  TL_FINISHED = 2,   // flushed at exit/signal, failed, or a forked child: pass-through
} tl_state_t;
static _Atomic int g_state = TL_PASSIVE;

static struct {
  bool configured;
  char output_dir[PATH_MAX];
  char filter[1024];
  uint64_t skip_ns;
  tl_event_t events[TL_MAX_EVENTS];
  int event_count;
} g_config;

// Guards the registries, the thread list and every write to the record file.
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static bool g_session_started;
static int g_fd = -1;
static uint64_t g_origin_ticks;
static uint64_t g_origin_ns;
static size_t g_record_size;
static int g_event_count;  // events that survived probing; fixed once recording

// Hooked exports: id -> real function (read by trampolines) and name (for dedup).
// Entries are written before the library copy that references them is returned
// to the runtime, which publishes it to its workers with its own synchronization.
static tl_abi_dispatch_fn_t g_export_fns[TL_TRAMPOLINE_COUNT];
static char* g_export_names[TL_TRAMPOLINE_COUNT];
static uint32_t g_export_count;
static bool g_export_limit_reported;

// Wrapped library queries: id -> real query function.
static tl_abi_query_fn_t g_query_fns[TL_TRAMPOLINE_COUNT];
static uint32_t g_query_count;
static bool g_query_limit_reported;

static uint32_t g_unsupported_versions_reported[8];
static int g_unsupported_version_count;

static uint64_t tl_now_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
}

// Timestamps are TSC ticks when the TSC is invariant and the kernel uses it as its
// clocksource (so it is synchronized across CPUs): rdtsc costs about half a vDSO
// clock_gettime on a VM, and the hook takes two per call. Each RECORDS and END chunk
// carries a (ticks, CLOCK_MONOTONIC ns) pair taken when it is written; with the
// header's pair, tracelink converts ticks to ns. Without a usable TSC, ticks are ns.
static bool g_use_tsc;

static inline uint64_t tl_ticks(void) {
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_expect(g_use_tsc, 1)) return __rdtsc();
#endif
  return tl_now_ns();
}

static bool tl_tsc_usable(void) {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax, ebx, ecx, edx;
  // CPUID 0x80000007 EDX bit 8: invariant TSC (constant rate in all power states).
  if (!__get_cpuid(0x80000007, &eax, &ebx, &ecx, &edx) || !(edx & (1u << 8))) return false;
  FILE* file = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
  if (!file) return false;
  char name[32] = {0};
  bool tsc = fgets(name, sizeof(name), file) && strcmp(name, "tsc\n") == 0;
  fclose(file);
  return tsc;
#else
  return false;
#endif
}

//===----------------------------------------------------------------------===//
// Record file chunks (callers hold g_lock, except the signal path which try-locks)
//===----------------------------------------------------------------------===//

static void tl_write_notice_locked(tl_notice_kind_t kind, uint32_t value, const char* text) {
  uint32_t head[2] = {(uint32_t)kind, value};
  struct iovec parts[2] = {{head, sizeof(head)}, {(void*)text, strlen(text) + 1}};
  tl_output_chunk(g_fd, TL_CHUNK_NOTICE, parts, 2);
}

static void tl_write_export_locked(uint32_t id, uint32_t ordinal, const tl_abi_header_t* header,
                                   const char* name) {
  uint32_t head[4] = {id, ordinal, id != UINT32_MAX ? 1u : 0u, header->version};
  const char* library = header->name ? header->name : "";
  struct iovec parts[3] = {
      {head, sizeof(head)},
      {(void*)library, strlen(library) + 1},
      {(void*)name, strlen(name) + 1},
  };
  tl_output_chunk(g_fd, TL_CHUNK_EXPORT, parts, 3);
}

static void tl_write_header_locked(void) {
  uint32_t head[6] = {(uint32_t)getpid(), (uint32_t)g_event_count, (uint32_t)g_record_size,
                      TL_TRAMPOLINE_COUNT, g_use_tsc ? 1u : 0u, 0};
  uint64_t times[3] = {g_origin_ticks, g_origin_ns, g_config.skip_ns};
  // Event names are stored back to back NUL-terminated; build them in one buffer.
  char names[TL_MAX_EVENTS * TL_EVENT_NAME_MAX];
  size_t length = 0;
  for (int i = 0; i < g_event_count; ++i) {
    size_t n = strlen(g_config.events[i].name) + 1;
    memcpy(names + length, g_config.events[i].name, n);
    length += n;
  }
  struct iovec parts[4] = {
      {head, sizeof(head)},
      {times, sizeof(times)},
      {names, length},
      {g_config.filter, strlen(g_config.filter) + 1},
  };
  tl_output_chunk(g_fd, TL_CHUNK_HEADER, parts, 4);
}

//===----------------------------------------------------------------------===//
// Threads: per-thread record buffers and counter groups
//===----------------------------------------------------------------------===//

typedef struct tl_thread_t {
  struct tl_thread_t* next;
  uint32_t index;
  // Records [0, count) are complete. Only the owner appends (release-store of
  // count); flushes happen under g_lock, so a flush by another thread at exit
  // sees whole records only.
  _Atomic uint32_t count;
  uint8_t* records;
  tl_constants_buffer_t constants;  // push constants of the dispatches this thread started
  tl_counter_group_t counters;
  // The export this thread is in a workgroup call of, TL_NO_EXPORT between calls: read by
  // the fault handler, which runs on the faulting thread (so volatile, not atomic, suffices).
  volatile uint32_t running_export;
  void* signal_stack;  // installed by the hook (NULL when the thread had one of its own)
} tl_thread_t;

// Marks a thread that runs dispatches unrecorded (registration failed or ended).
static tl_thread_t g_untracked;
// initial-exec: the library is preloaded, so static TLS is available and cheap.
static __thread tl_thread_t* tls_thread __attribute__((tls_model("initial-exec")));
static pthread_key_t g_thread_key;  // its destructor flushes a thread's records at thread exit
static tl_thread_t* g_threads;
static uint32_t g_thread_count;
static bool g_counter_failure_reported;

// Writes a thread's buffered records and push constants (the caller resets the buffers).
static void tl_write_records_locked(tl_thread_t* thread) {
  uint32_t used = atomic_load_explicit(&thread->constants.used, memory_order_acquire);
  if (used) {
    struct iovec part = {thread->constants.bytes, used};
    tl_output_chunk(g_fd, TL_CHUNK_CONSTANTS, &part, 1);
  }
  uint32_t count = atomic_load_explicit(&thread->count, memory_order_acquire);
  if (count == 0) return;
  uint64_t calibration[2] = {tl_ticks(), tl_now_ns()};
  struct iovec parts[2] = {{calibration, sizeof(calibration)},
                           {thread->records, (size_t)count * g_record_size}};
  tl_output_chunk(g_fd, TL_CHUNK_RECORDS, parts, 2);
}

// Gives the calling thread a signal stack unless it has one. Returns it (NULL if none was installed).
static void* tl_signal_stack_install(void) {
  stack_t current;
  if (sigaltstack(NULL, &current) != 0 || !(current.ss_flags & SS_DISABLE)) return NULL;
  stack_t stack = {.ss_sp = malloc(TL_SIGNAL_STACK_BYTES), .ss_size = TL_SIGNAL_STACK_BYTES, .ss_flags = 0};
  if (stack.ss_sp && sigaltstack(&stack, NULL) == 0) return stack.ss_sp;
  free(stack.ss_sp);
  return NULL;
}

// On the thread itself (at its exit), before its signal stack is freed.
static void tl_signal_stack_remove(void* signal_stack) {
  if (!signal_stack) return;
  stack_t off = {.ss_sp = NULL, .ss_size = 0, .ss_flags = SS_DISABLE};
  sigaltstack(&off, NULL);
  free(signal_stack);
}

static void tl_thread_free(tl_thread_t* thread) {
  tl_counter_group_close(&thread->counters, g_event_count);
  free(thread->records);
  free(thread->constants.bytes);
  free(thread);
}

static tl_thread_t* tl_thread_register(void) {
  tl_thread_t* thread = calloc(1, sizeof(*thread));
  uint8_t* records = thread ? malloc(TL_RECORDS_PER_FLUSH * g_record_size) : NULL;
  uint8_t* constants = records ? malloc(TL_CONSTANTS_BUFFER_BYTES) : NULL;
  if (!constants) {
    free(records);
    free(thread);
    tls_thread = &g_untracked;
    return &g_untracked;
  }
  thread->records = records;
  thread->constants.bytes = constants;
  thread->running_export = TL_NO_EXPORT;
  int failed = tl_counter_group_open(&thread->counters, g_config.events, g_event_count);

  char name[64];
  if (pthread_getname_np(pthread_self(), name, sizeof(name)) != 0 || name[0] == 0) {
    snprintf(name, sizeof(name), "thread-%d", gettid());
  }
  pthread_mutex_lock(&g_lock);
  if (atomic_load(&g_state) != TL_RECORDING) {
    pthread_mutex_unlock(&g_lock);
    tl_thread_free(thread);
    tls_thread = &g_untracked;
    return &g_untracked;
  }
  thread->index = g_thread_count++;
  thread->next = g_threads;
  g_threads = thread;
  int32_t head[2] = {(int32_t)thread->index, (int32_t)gettid()};
  struct iovec parts[2] = {{head, sizeof(head)}, {name, strlen(name) + 1}};
  tl_output_chunk(g_fd, TL_CHUNK_THREAD, parts, 2);
  if (failed) {
    tl_write_notice_locked(TL_NOTICE_COUNTER_FAILED, thread->index, name);
    if (!g_counter_failure_reported) {
      g_counter_failure_reported = true;
      fprintf(stderr,
              "tracelink hook: warning: %d perf event(s) could not be opened in thread %s; "
              "their counters are missing there\n",
              failed, name);
    }
  }
  pthread_mutex_unlock(&g_lock);
  thread->signal_stack = tl_signal_stack_install();
  pthread_setspecific(g_thread_key, thread);
  tls_thread = thread;
  return thread;
}

// pthread key destructor: the thread is exiting, write out what it buffered.
static void tl_thread_exit(void* arg) {
  tl_thread_t* thread = arg;
  tls_thread = &g_untracked;
  // Once finished (exit flush done, or a forked child) the list is no longer
  // walked; leave it untouched rather than take a lock a forking thread may hold.
  if (atomic_load(&g_state) != TL_RECORDING) return;
  pthread_mutex_lock(&g_lock);
  if (atomic_load(&g_state) == TL_RECORDING) tl_write_records_locked(thread);
  for (tl_thread_t** link = &g_threads; *link; link = &(*link)->next) {
    if (*link == thread) {
      *link = thread->next;
      break;
    }
  }
  pthread_mutex_unlock(&g_lock);
  tl_signal_stack_remove(thread->signal_stack);
  tl_thread_free(thread);
}

// The owner's buffer is full: write it and start over.
static void tl_thread_flush(tl_thread_t* thread) {
  pthread_mutex_lock(&g_lock);
  if (atomic_load(&g_state) == TL_RECORDING) tl_write_records_locked(thread);
  atomic_store_explicit(&thread->count, 0, memory_order_relaxed);
  atomic_store_explicit(&thread->constants.used, 0, memory_order_relaxed);
  pthread_mutex_unlock(&g_lock);
}

//===----------------------------------------------------------------------===//
// The per-workgroup hook
//===----------------------------------------------------------------------===//

static void tl_append(tl_thread_t* thread, const tl_record_t* record, const uint64_t* before,
                      const uint64_t* after) {
  uint32_t count = atomic_load_explicit(&thread->count, memory_order_relaxed);
  if (TL_UNLIKELY(count == TL_RECORDS_PER_FLUSH)) {
    tl_thread_flush(thread);
    count = 0;
  }
  uint8_t* slot = thread->records + (size_t)count * g_record_size;
  memcpy(slot, record, sizeof(*record));
  uint64_t* counters = (uint64_t*)(slot + sizeof(*record));
  for (int i = 0; i < g_event_count; ++i) {
    counters[i] = (before[i] == TL_COUNTER_MISSING || after[i] == TL_COUNTER_MISSING)
                      ? TL_COUNTER_MISSING
                      : after[i] - before[i];
  }
  atomic_store_explicit(&thread->count, count + 1, memory_order_release);
}

// Once per dispatch (its first workgroup), after the timed call.
static void tl_append_constants(tl_thread_t* thread, const tl_record_t* record,
                                const tl_abi_dispatch_state_t* dispatch_state) {
  uint16_t count = dispatch_state->push_constant_count;
  tl_constants_entry_t entry = {
      .dispatch_key = record->dispatch_key,
      .start_ticks = record->start_ticks,
      .export_id = record->export_id,
      .count = count,
      .stored = count < TL_MAX_CONSTANTS ? count : TL_MAX_CONSTANTS,
  };
  if (tl_constants_append(&thread->constants, &entry, dispatch_state->push_constants) == 0) return;
  tl_thread_flush(thread);
  tl_constants_append(&thread->constants, &entry, dispatch_state->push_constants);
}

__attribute__((noinline)) static int tl_dispatch(uint32_t id, const void* environment,
                                                 const tl_abi_dispatch_state_t* dispatch_state,
                                                 const tl_abi_workgroup_state_t* workgroup_state) {
  tl_abi_dispatch_fn_t real = g_export_fns[id];
  if (TL_UNLIKELY(atomic_load_explicit(&g_state, memory_order_relaxed) != TL_RECORDING)) {
    return real(environment, dispatch_state, workgroup_state);
  }
  tl_thread_t* thread = tls_thread;
  if (TL_UNLIKELY(thread == NULL)) thread = tl_thread_register();
  if (TL_UNLIKELY(thread == &g_untracked)) return real(environment, dispatch_state, workgroup_state);

  uint64_t before[TL_MAX_EVENTS];
  uint64_t after[TL_MAX_EVENTS];
  // Counters are read outside the timed window so the window holds only the call.
  if (g_event_count) tl_counter_group_read(&thread->counters, g_event_count, before);
  int cpu = sched_getcpu();
  thread->running_export = id;
  uint64_t start = tl_ticks();
  int status = real(environment, dispatch_state, workgroup_state);
  uint64_t end = tl_ticks();
  thread->running_export = TL_NO_EXPORT;
  if (g_event_count) tl_counter_group_read(&thread->counters, g_event_count, after);

  // Which dispatch is this? Not the dispatch_state pointer: the 3.13 local-task
  // runtime passes each worker's own stack copy of the state, reused for every
  // dispatch the worker runs. The copy's binding_ptrs is: it points at the binding
  // table stored with the dispatch command, shared by all workers. That storage is
  // reused (by the next recorded command buffer, or the single inline state of
  // local-sync) only after the dispatch completed, so tracelink splits a key's calls,
  // in start order, into dispatches of workgroup_count calls. Keeping this
  // bookkeeping out of the hot path avoids a shared lock per call. Limit: two
  // concurrent dispatches of one export with no bindings at all would share a key.
  tl_record_t record = {
      .dispatch_key = (uint64_t)(uintptr_t)dispatch_state->binding_ptrs,
      .start_ticks = start,
      .duration_ticks = end - start,
      .export_id = id,
      .thread = thread->index,
      .workgroup_id_x = workgroup_state->workgroup_id_x,
      .workgroup_id_y = workgroup_state->workgroup_id_y,
      .workgroup_count_x = dispatch_state->workgroup_count_x,
      .workgroup_count_y = dispatch_state->workgroup_count_y,
      .workgroup_id_z = workgroup_state->workgroup_id_z,
      .workgroup_count_z = dispatch_state->workgroup_count_z,
      .cpu = cpu,
  };
  tl_append(thread, &record, before, after);
  if (dispatch_state->push_constant_count && !workgroup_state->workgroup_id_x &&
      !workgroup_state->workgroup_id_y && !workgroup_state->workgroup_id_z) {
    tl_append_constants(thread, &record, dispatch_state);
  }
  return status;
}

#define TL_DISPATCH_TRAMPOLINE(id)                                                      \
  static int tl_dispatch_##id(const void* environment,                                  \
                              const tl_abi_dispatch_state_t* dispatch_state,            \
                              const tl_abi_workgroup_state_t* workgroup_state) {        \
    return tl_dispatch(0x##id, environment, dispatch_state, workgroup_state);           \
  }
TL_FOR_EACH_SLOT(TL_DISPATCH_TRAMPOLINE)
#define TL_DISPATCH_ENTRY(id) tl_dispatch_##id,
static const tl_abi_dispatch_fn_t g_dispatch_trampolines[TL_TRAMPOLINE_COUNT] = {
    TL_FOR_EACH_SLOT(TL_DISPATCH_ENTRY)};

//===----------------------------------------------------------------------===//
// End of recording: exit, fatal signals, fork
//===----------------------------------------------------------------------===//

// Writes every buffered record and stops recording. From a signal handler only a
// try-lock is safe: if the interrupted code holds the lock, buffered records are lost.
// |faulted_export|: the export whose workgroup call took the fault, else TL_NO_EXPORT.
static void tl_finish(int signal_number, uint32_t faulted_export) {
  if (atomic_load(&g_state) != TL_RECORDING) return;
  if (signal_number) {
    if (pthread_mutex_trylock(&g_lock) != 0) return;
  } else {
    pthread_mutex_lock(&g_lock);
  }
  if (atomic_load(&g_state) == TL_RECORDING) {
    atomic_store(&g_state, TL_FINISHED);
    for (tl_thread_t* thread = g_threads; thread; thread = thread->next) {
      tl_write_records_locked(thread);
    }
    if (faulted_export != TL_NO_EXPORT) {
      tl_write_notice_locked(TL_NOTICE_FAULT_IN_EXPORT, faulted_export, "");
    }
    if (signal_number) {
      tl_write_notice_locked(TL_NOTICE_SIGNAL, (uint32_t)signal_number, "");
    } else {
      uint64_t end[3] = {tl_ticks(), tl_now_ns(), g_thread_count};
      struct iovec part = {end, sizeof(end)};
      tl_output_chunk(g_fd, TL_CHUNK_END, &part, 1);
    }
    close(g_fd);
    g_fd = -1;
  }
  pthread_mutex_unlock(&g_lock);
}

static const int kFatalSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGSEGV,
                                    SIGBUS,  SIGFPE, SIGILL, SIGABRT};
static struct sigaction g_previous_actions[NSIG];

static void tl_on_fatal_signal(int signal_number) {
  int saved_errno = errno;
  // A fault is delivered to the thread that took it: the export it was running, if any, is the culprit.
  bool fault = signal_number == SIGSEGV || signal_number == SIGBUS || signal_number == SIGFPE ||
               signal_number == SIGILL;
  tl_thread_t* thread = tls_thread;
  bool recorded = thread != NULL && thread != &g_untracked;
  tl_finish(signal_number, fault && recorded ? thread->running_export : TL_NO_EXPORT);
  // Back to the default action, then let the signal take the process down as it
  // would have: re-raised now, delivered when this handler returns.
  sigaction(signal_number, &g_previous_actions[signal_number], NULL);
  raise(signal_number);
  errno = saved_errno;
}

// Only signals still at their default (fatal) action get a handler: a handler the
// program installed means it handles the signal itself and exits normally.
static void tl_install_signal_handlers(void) {
  for (size_t i = 0; i < sizeof(kFatalSignals) / sizeof(kFatalSignals[0]); ++i) {
    int signal_number = kFatalSignals[i];
    struct sigaction current;
    if (sigaction(signal_number, NULL, &current) != 0 || current.sa_handler != SIG_DFL ||
        (current.sa_flags & SA_SIGINFO)) {
      continue;
    }
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = tl_on_fatal_signal;
    action.sa_flags = SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    g_previous_actions[signal_number] = current;
    sigaction(signal_number, &action, NULL);
  }
}

__attribute__((destructor)) static void tl_on_unload(void) { tl_finish(0, TL_NO_EXPORT); }

// A forked child (without exec) shares nothing it could safely write with the
// parent's file; it runs unhooked.
static void tl_after_fork_child(void) {
  atomic_store(&g_state, TL_FINISHED);
  g_fd = -1;
}

//===----------------------------------------------------------------------===//
// Sessions, libraries and queries
//===----------------------------------------------------------------------===//

typedef struct tl_dropped_event_t {
  char text[TL_EVENT_NAME_MAX + 200];
} tl_dropped_event_t;
static tl_dropped_event_t g_dropped_events[TL_MAX_EVENTS];
static int g_dropped_event_count;

static void tl_remember_dropped_event(const char* name, const char* reason) {
  if (g_dropped_event_count == TL_MAX_EVENTS) return;
  snprintf(g_dropped_events[g_dropped_event_count++].text, sizeof(g_dropped_events[0].text),
           "%s: %s", name, reason);
}

// Starts recording on the first library query. Returns whether recording.
static bool tl_session_start_locked(void) {
  if (g_session_started) return atomic_load(&g_state) == TL_RECORDING;
  g_session_started = true;
  g_event_count = g_config.event_count;
  tl_events_probe(g_config.events, &g_event_count, tl_remember_dropped_event);
  g_record_size = sizeof(tl_record_t) + (size_t)g_event_count * sizeof(uint64_t);

  char path[PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/hook-%d.tlhk", g_config.output_dir, (int)getpid());
  g_fd = tl_output_create(path);
  if (g_fd < 0) {
    fprintf(stderr, "tracelink hook: error: cannot create %s: %s; not recording\n", path,
            strerror(errno));
    atomic_store(&g_state, TL_FINISHED);
    return false;
  }
  tl_write_header_locked();
  for (int i = 0; i < g_dropped_event_count; ++i) {
    tl_write_notice_locked(TL_NOTICE_EVENT_DROPPED, 0, g_dropped_events[i].text);
  }
  tl_install_signal_handlers();
  atomic_store(&g_state, TL_RECORDING);
  return true;
}

static bool tl_filter_matches(const char* name) {
  return g_config.filter[0] == 0 || fnmatch(g_config.filter, name, 0) == 0;
}

// Returns the export id of (real, name), registering it if new, or UINT32_MAX.
// Reusing ids for the same function and name keeps repeated loads of one module
// (common in Python) from exhausting the trampolines.
static uint32_t tl_export_id_locked(tl_abi_dispatch_fn_t real, const char* name) {
  for (uint32_t id = 0; id < g_export_count; ++id) {
    if (g_export_fns[id] == real && strcmp(g_export_names[id], name) == 0) return id;
  }
  if (g_export_count == TL_TRAMPOLINE_COUNT) {
    if (!g_export_limit_reported) {
      g_export_limit_reported = true;
      fprintf(stderr,
              "tracelink hook: error: more than %d exports to hook in this process; "
              "'%s' and later ones run unhooked (narrow IREE_HOOK_FILTER_NAME)\n",
              TL_TRAMPOLINE_COUNT, name);
      tl_write_notice_locked(TL_NOTICE_EXPORT_LIMIT, TL_TRAMPOLINE_COUNT, name);
    }
    return UINT32_MAX;
  }
  char* copy = strdup(name);
  if (!copy) return UINT32_MAX;
  g_export_fns[g_export_count] = real;
  g_export_names[g_export_count] = copy;
  return g_export_count++;
}

static void tl_report_unsupported_locked(const tl_abi_header_t* header) {
  tl_write_notice_locked(TL_NOTICE_UNSUPPORTED_ABI, header->version,
                         header->name ? header->name : "");
  for (int i = 0; i < g_unsupported_version_count; ++i) {
    if (g_unsupported_versions_reported[i] == header->version) return;
  }
  if (g_unsupported_version_count < 8) {
    g_unsupported_versions_reported[g_unsupported_version_count++] = header->version;
  }
  fprintf(stderr,
          "tracelink hook: executable library ABI version %u (library '%s') is not supported "
          "(only version %u); it runs unhooked\n",
          header->version, header->name ? header->name : "?", TL_ABI_SUPPORTED_VERSION);
}

// Returns the library to hand to the runtime: a hooked heap copy, or the original.
static const tl_abi_header_t** tl_hook_library(const tl_abi_header_t** result) {
  const tl_abi_library_t* library = (const tl_abi_library_t*)result;
  const tl_abi_header_t* header = library->header;
  pthread_mutex_lock(&g_lock);
  if (!tl_session_start_locked()) {
    pthread_mutex_unlock(&g_lock);
    return result;
  }
  if (header->version != TL_ABI_SUPPORTED_VERSION) {
    tl_report_unsupported_locked(header);
    pthread_mutex_unlock(&g_lock);
    return result;
  }
  uint32_t count = library->exports.count;
  // The copy lives as long as the runtime may use it; we are never told when it
  // unloads the library, so it is intentionally not freed.
  tl_abi_library_t* copy = malloc(sizeof(*copy));
  tl_abi_dispatch_fn_t* ptrs = malloc((count ? count : 1) * sizeof(*ptrs));
  if (!copy || !ptrs) {
    free(copy);
    free(ptrs);
    pthread_mutex_unlock(&g_lock);
    return result;
  }
  *copy = *library;
  uint32_t hooked = 0;
  for (uint32_t i = 0; i < count; ++i) {
    const char* name = library->exports.names ? library->exports.names[i] : NULL;
    ptrs[i] = library->exports.ptrs[i];
    uint32_t id = UINT32_MAX;
    if (name && ptrs[i] && tl_filter_matches(name)) id = tl_export_id_locked(ptrs[i], name);
    if (id != UINT32_MAX) {
      ptrs[i] = g_dispatch_trampolines[id];
      ++hooked;
    }
    tl_write_export_locked(id, i, header, name ? name : "");
  }
  pthread_mutex_unlock(&g_lock);
  if (hooked == 0) {
    free(copy);
    free(ptrs);
    return result;
  }
  copy->exports.ptrs = ptrs;
  return (const tl_abi_header_t**)copy;
}

__attribute__((noinline)) static const tl_abi_header_t** tl_query(uint32_t id, uint32_t max_version,
                                                                  const void* environment) {
  const tl_abi_header_t** result = g_query_fns[id](max_version, environment);
  if (!result || !*result || atomic_load(&g_state) == TL_FINISHED) return result;
  return tl_hook_library(result);
}

#define TL_QUERY_TRAMPOLINE(id)                                                         \
  static const tl_abi_header_t** tl_query_##id(uint32_t max_version,                    \
                                               const void* environment) {               \
    return tl_query(0x##id, max_version, environment);                                  \
  }
TL_FOR_EACH_SLOT(TL_QUERY_TRAMPOLINE)
#define TL_QUERY_ENTRY(id) tl_query_##id,
static const tl_abi_query_fn_t g_query_trampolines[TL_TRAMPOLINE_COUNT] = {
    TL_FOR_EACH_SLOT(TL_QUERY_ENTRY)};

// Each library's query function gets its own trampoline (keyed by address: a
// library loaded again at the same address reuses it, which is still correct).
static void* tl_wrap_query(void* real) {
  if (!real || !g_config.configured || atomic_load(&g_state) == TL_FINISHED) return real;
  pthread_mutex_lock(&g_lock);
  uint32_t id = 0;
  while (id < g_query_count && g_query_fns[id] != (tl_abi_query_fn_t)real) ++id;
  if (id == g_query_count) {
    if (g_query_count == TL_TRAMPOLINE_COUNT) {
      if (!g_query_limit_reported && tl_session_start_locked()) {
        g_query_limit_reported = true;
        fprintf(stderr,
                "tracelink hook: error: more than %d executable libraries loaded in this "
                "process; later ones run unhooked\n",
                TL_TRAMPOLINE_COUNT);
        tl_write_notice_locked(TL_NOTICE_QUERY_LIMIT, TL_TRAMPOLINE_COUNT, "");
      }
      pthread_mutex_unlock(&g_lock);
      return real;
    }
    g_query_fns[g_query_count++] = (tl_abi_query_fn_t)real;
  }
  pthread_mutex_unlock(&g_lock);
  return (void*)g_query_trampolines[id];
}

//===----------------------------------------------------------------------===//
// dlsym interposition
//===----------------------------------------------------------------------===//

typedef void* (*tl_dlsym_fn_t)(void*, const char*);
static tl_dlsym_fn_t g_real_dlsym;

static tl_dlsym_fn_t tl_real_dlsym(void) {
  tl_dlsym_fn_t real = __atomic_load_n(&g_real_dlsym, __ATOMIC_ACQUIRE);
  if (TL_UNLIKELY(!real)) {
    // dlvsym is not interposed, so it can look up the next dlsym without recursing.
    // glibc >= 2.34 defines dlsym@@GLIBC_2.34 in libc, older ones dlsym@GLIBC_2.2.5.
    real = (tl_dlsym_fn_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (!real) real = (tl_dlsym_fn_t)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (!real) {
      fprintf(stderr, "tracelink hook: fatal: cannot find the real dlsym (glibc required)\n");
      abort();
    }
    __atomic_store_n(&g_real_dlsym, real, __ATOMIC_RELEASE);
  }
  return real;
}

TL_PUBLIC void* dlsym(void* handle, const char* symbol) {
  tl_dlsym_fn_t real = tl_real_dlsym();
  if (TL_UNLIKELY(strcmp(symbol, TL_ABI_QUERY_SYMBOL) == 0)) {
    return tl_wrap_query(real(handle, symbol));
  }
  // A tail call, so the real dlsym sees the caller's return address (RTLD_NEXT
  // and namespace lookups depend on it).
  return real(handle, symbol);
}

//===----------------------------------------------------------------------===//
// Configuration
//===----------------------------------------------------------------------===//

// Reports a configuration error in the record file (so tracelink can show it),
// on stderr, and exits: running the program unprofiled would waste the run.
static void tl_config_fail(const char* message) {
  fprintf(stderr, "tracelink hook: error: %s\n", message);
  char path[PATH_MAX + 32];
  snprintf(path, sizeof(path), "%s/hook-%d.tlhk", g_config.output_dir, (int)getpid());
  g_fd = tl_output_create(path);
  if (g_fd >= 0) tl_write_notice_locked(TL_NOTICE_CONFIG_ERROR, 0, message);
  _exit(2);
}

static void tl_config_load(const char* output_dir) {
  char error[512];
  if (strlen(output_dir) >= sizeof(g_config.output_dir)) {
    fprintf(stderr, "tracelink hook: error: TRACELINK_HOOK_OUTPUT is too long\n");
    _exit(2);
  }
  strcpy(g_config.output_dir, output_dir);
  struct stat info;
  if (stat(output_dir, &info) != 0 || !S_ISDIR(info.st_mode) || access(output_dir, W_OK | X_OK)) {
    fprintf(stderr, "tracelink hook: error: TRACELINK_HOOK_OUTPUT=%s is not a writable directory\n",
            output_dir);
    _exit(2);
  }
  const char* filter = getenv("IREE_HOOK_FILTER_NAME");
  if (filter) {
    if (strlen(filter) >= sizeof(g_config.filter)) tl_config_fail("IREE_HOOK_FILTER_NAME is too long");
    strcpy(g_config.filter, filter);
  }
  const char* skip = getenv("IREE_HOOK_SKIP_START_MS");
  if (skip && *skip) {
    char* end = NULL;
    double milliseconds = strtod(skip, &end);
    if (*end != 0 || !isfinite(milliseconds) || milliseconds < 0) {
      snprintf(error, sizeof(error),
               "IREE_HOOK_SKIP_START_MS=%s is not a non-negative number of milliseconds", skip);
      tl_config_fail(error);
    }
    g_config.skip_ns = (uint64_t)(milliseconds * 1e6);
  }
  const char* events = getenv("IREE_HOOK_PERF_EVENT_TYPES");
  if (events && tl_events_parse(events, g_config.events, &g_config.event_count, error,
                                sizeof(error)) != 0) {
    tl_config_fail(error);
  }
}

__attribute__((constructor)) static void tl_on_load(void) {
  if (getenv("IREE_HOOK_LIST_EVENT_TYPES")) {
    tl_events_print_list(stdout);
    fflush(stdout);
    exit(0);
  }
  const char* output_dir = getenv("TRACELINK_HOOK_OUTPUT");
  if (!output_dir || !*output_dir) {
    fprintf(stderr,
            "tracelink hook: TRACELINK_HOOK_OUTPUT is not set; not recording "
            "(run the program through `tracelink hook -- CMD`)\n");
    return;
  }
  tl_config_load(output_dir);
  g_use_tsc = tl_tsc_usable();
  g_origin_ticks = tl_ticks();
  g_origin_ns = tl_now_ns();
  if (pthread_key_create(&g_thread_key, tl_thread_exit) != 0) {
    fprintf(stderr, "tracelink hook: error: pthread_key_create failed; not recording\n");
    return;
  }
  pthread_atfork(NULL, NULL, tl_after_fork_child);
  g_config.configured = true;
}
