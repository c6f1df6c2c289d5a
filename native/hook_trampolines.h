// Expands M(id) once for each of the 4096 three-hex-digit ids 000..fff, in order.
//
// C has no closures, so each hooked export (and each wrapped library query) gets
// its own generated function whose only job is to pass its fixed id on; the id
// indexes a table holding the real function pointer. `0x##id` is the numeric id,
// `name_##id` a unique function name.

#ifndef TRACELINK_HOOK_TRAMPOLINES_H_
#define TRACELINK_HOOK_TRAMPOLINES_H_

#define TL_TRAMPOLINE_COUNT 4096

#define TL_SLOTS_3(M, p) \
  M(p##0) M(p##1) M(p##2) M(p##3) M(p##4) M(p##5) M(p##6) M(p##7) \
  M(p##8) M(p##9) M(p##a) M(p##b) M(p##c) M(p##d) M(p##e) M(p##f)
#define TL_SLOTS_2(M, p)                                                                  \
  TL_SLOTS_3(M, p##0) TL_SLOTS_3(M, p##1) TL_SLOTS_3(M, p##2) TL_SLOTS_3(M, p##3)         \
  TL_SLOTS_3(M, p##4) TL_SLOTS_3(M, p##5) TL_SLOTS_3(M, p##6) TL_SLOTS_3(M, p##7)         \
  TL_SLOTS_3(M, p##8) TL_SLOTS_3(M, p##9) TL_SLOTS_3(M, p##a) TL_SLOTS_3(M, p##b)         \
  TL_SLOTS_3(M, p##c) TL_SLOTS_3(M, p##d) TL_SLOTS_3(M, p##e) TL_SLOTS_3(M, p##f)
#define TL_FOR_EACH_SLOT(M)                                                               \
  TL_SLOTS_2(M, 0) TL_SLOTS_2(M, 1) TL_SLOTS_2(M, 2) TL_SLOTS_2(M, 3)                     \
  TL_SLOTS_2(M, 4) TL_SLOTS_2(M, 5) TL_SLOTS_2(M, 6) TL_SLOTS_2(M, 7)                     \
  TL_SLOTS_2(M, 8) TL_SLOTS_2(M, 9) TL_SLOTS_2(M, a) TL_SLOTS_2(M, b)                     \
  TL_SLOTS_2(M, c) TL_SLOTS_2(M, d) TL_SLOTS_2(M, e) TL_SLOTS_2(M, f)

#endif  // TRACELINK_HOOK_TRAMPOLINES_H_
