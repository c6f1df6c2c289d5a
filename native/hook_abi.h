// The IREE executable-library ABI, version 0.6, as far as the hook needs it.
//
// Written from the field list of iree/hal/local/executable_library.h and checked
// against the LLVM struct types iree-compile 3.13 emits for a system-library
// executable (`--iree-hal-dump-executable-intermediates-to`, *.linked.ll):
//   header            = { i32, ptr, i32, i32 }
//   library           = { ptr, {i32, ptr}, export_table, {i32}, {i32, ptr} }
//   export_table      = { i32, ptr x 9 }
//   dispatch_state    = { i32, i32, i16, i16, i32, i32, i16, i8, i8, ptr, ptr, ptr }
//   workgroup_state   = { i32, i32, i16, i16, i32, ptr, i32 }
// Only version 6 is interpreted; any other version passes through unhooked
// because the layouts below (dispatch_state in particular) differ across versions.

#ifndef TRACELINK_HOOK_ABI_H_
#define TRACELINK_HOOK_ABI_H_

#include <stddef.h>
#include <stdint.h>

#define TL_ABI_SUPPORTED_VERSION 6u
#define TL_ABI_QUERY_SYMBOL "iree_hal_executable_library_query"

typedef struct tl_abi_header_t {
  uint32_t version;
  const char* name;
  uint32_t features;
  uint32_t sanitizer;
} tl_abi_header_t;

typedef struct tl_abi_dispatch_state_t {
  uint32_t workgroup_size_x;
  uint32_t workgroup_size_y;
  uint16_t workgroup_size_z;
  uint16_t push_constant_count;
  uint32_t workgroup_count_x;
  uint32_t workgroup_count_y;
  uint16_t workgroup_count_z;
  uint8_t max_concurrency;
  uint8_t binding_count;
  const uint32_t* push_constants;
  void* const* binding_ptrs;
  const size_t* binding_lengths;
} tl_abi_dispatch_state_t;

typedef struct tl_abi_workgroup_state_t {
  uint32_t workgroup_id_x;
  uint32_t workgroup_id_y;
  uint16_t workgroup_id_z;
  uint16_t reserved;
  uint32_t processor_id;
  void* local_memory;
  uint32_t local_memory_size;
} tl_abi_workgroup_state_t;

// The environment is only forwarded, never read.
typedef int (*tl_abi_dispatch_fn_t)(const void* environment,
                                    const tl_abi_dispatch_state_t* dispatch_state,
                                    const tl_abi_workgroup_state_t* workgroup_state);

typedef const tl_abi_header_t** (*tl_abi_query_fn_t)(uint32_t max_version,
                                                     const void* environment);

typedef struct tl_abi_export_table_t {
  uint32_t count;
  const tl_abi_dispatch_fn_t* ptrs;
  const void* attrs;
  const void* params;
  const void* occupancy;
  const char* const* names;
  const char* const* tags;
  const char* const* parameter_names;
  const void* source_locations;
  const void* stage_locations;
} tl_abi_export_table_t;

// The query returns a pointer to this struct (its first member is the header
// pointer, hence the `const header**` return type).
typedef struct tl_abi_library_t {
  const tl_abi_header_t* header;
  struct {
    uint32_t count;
    const char* const* symbols;
  } imports;
  tl_abi_export_table_t exports;
  struct {
    uint32_t count;
  } constants;
  struct {
    uint32_t count;
    const void* files;
  } sources;
} tl_abi_library_t;

_Static_assert(sizeof(tl_abi_dispatch_state_t) == 48, "dispatch_state layout");
_Static_assert(offsetof(tl_abi_dispatch_state_t, workgroup_count_x) == 12, "dispatch_state layout");
_Static_assert(offsetof(tl_abi_workgroup_state_t, processor_id) == 12, "workgroup_state layout");
_Static_assert(offsetof(tl_abi_library_t, exports) == 24, "library layout");
_Static_assert(sizeof(tl_abi_export_table_t) == 80, "export table layout");
_Static_assert(sizeof(tl_abi_library_t) == 128, "library layout");

#endif  // TRACELINK_HOOK_ABI_H_
