/* The hot-path counter (benchmarks/hot_path_counts.py): an LD_PRELOAD library
 * that counts, while enabled, the calls that cost a small op its time:
 * allocations (malloc, calloc, realloc, posix_memalign, aligned_alloc;
 * operator new calls malloc), lock acquisitions (pthread_mutex_lock and
 * trylock, pthread_rwlock_*lock), futex waits made through syscall() (the
 * atomic waits of libstdc++) and condition waits, and GIL acquisitions
 * (PyEval_RestoreThread, PyEval_AcquireThread, PyGILState_Ensure: the calls
 * extension modules make through the PLT; pybind11's gil_scoped_acquire takes
 * PyEval_AcquireThread). Each count is split by thread: the "host" thread is the
 * one that called hpc_reset(); every other thread is counted as "engine" (in
 * the loops measured, the stub's engines are the only other threads at work).
 *
 * Built by the script at run time with the system compiler; C, so that it
 * allocates nothing itself. Counting never allocates: the allocation hooks
 * call glibc's __libc_* entry points, the others resolve their target once
 * with dlsym (whose own allocations are not counted: counting is off then).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { HPC_MALLOC, HPC_LOCK, HPC_FUTEX_WAIT, HPC_COND_WAIT, HPC_GIL, HPC_KINDS };
enum { HPC_HOST, HPC_ENGINE, HPC_SIDES };

static long hpc_counts[HPC_SIDES][HPC_KINDS];
static volatile int hpc_enabled;
static volatile long hpc_host_tid;
static __thread long hpc_tid __attribute__((tls_model("initial-exec")));
static __thread int hpc_inside __attribute__((tls_model("initial-exec")));

static void count(int kind) {
  if (!hpc_enabled || hpc_inside) return;
  if (hpc_tid == 0) hpc_tid = (long)gettid();
  const int side = hpc_tid == hpc_host_tid ? HPC_HOST : HPC_ENGINE;
  __atomic_fetch_add(&hpc_counts[side][kind], 1, __ATOMIC_RELAXED);
}

/* ---- the interface the script calls through ctypes */
void hpc_reset(void) {
  hpc_enabled = 0;
  for (int s = 0; s < HPC_SIDES; ++s)
    for (int k = 0; k < HPC_KINDS; ++k) __atomic_store_n(&hpc_counts[s][k], 0, __ATOMIC_RELAXED);
  if (hpc_tid == 0) hpc_tid = (long)gettid();
  hpc_host_tid = hpc_tid;
}
void hpc_enable(int on) { __atomic_store_n(&hpc_enabled, on, __ATOMIC_SEQ_CST); }
/* out[side * HPC_KINDS + kind] */
void hpc_read(long* out) {
  for (int s = 0; s < HPC_SIDES; ++s)
    for (int k = 0; k < HPC_KINDS; ++k)
      out[s * HPC_KINDS + k] = __atomic_load_n(&hpc_counts[s][k], __ATOMIC_RELAXED);
}
int hpc_kinds(void) { return HPC_KINDS; }

/* ---- allocations */
extern void* __libc_malloc(size_t);
extern void* __libc_calloc(size_t, size_t);
extern void* __libc_realloc(void*, size_t);
extern void* __libc_memalign(size_t, size_t);

void* malloc(size_t n) {
  count(HPC_MALLOC);
  return __libc_malloc(n);
}
void* calloc(size_t n, size_t size) {
  count(HPC_MALLOC);
  return __libc_calloc(n, size);
}
void* realloc(void* p, size_t n) {
  count(HPC_MALLOC);
  return __libc_realloc(p, n);
}
int posix_memalign(void** out, size_t alignment, size_t n) {
  count(HPC_MALLOC);
  void* p = __libc_memalign(alignment, n);
  if (p == NULL) return 12; /* ENOMEM */
  *out = p;
  return 0;
}
void* aligned_alloc(size_t alignment, size_t n) {
  count(HPC_MALLOC);
  return __libc_memalign(alignment, n);
}
void* memalign(size_t alignment, size_t n) {
  count(HPC_MALLOC);
  return __libc_memalign(alignment, n);
}

/* ---- everything else goes to the next definition, resolved once */
#define NEXT(type, name, args)                                      \
  static type(*next_##name) args;                                   \
  static void resolve_##name(void) {                                \
    if (next_##name == NULL) {                                      \
      ++hpc_inside;                                                 \
      next_##name = (type(*) args)dlsym(RTLD_NEXT, #name);          \
      --hpc_inside;                                                 \
    }                                                               \
  }

NEXT(int, pthread_mutex_lock, (pthread_mutex_t*))
NEXT(int, pthread_mutex_trylock, (pthread_mutex_t*))
NEXT(int, pthread_rwlock_rdlock, (pthread_rwlock_t*))
NEXT(int, pthread_rwlock_wrlock, (pthread_rwlock_t*))
NEXT(int, pthread_rwlock_tryrdlock, (pthread_rwlock_t*))
NEXT(int, pthread_rwlock_trywrlock, (pthread_rwlock_t*))
NEXT(int, pthread_cond_wait, (pthread_cond_t*, pthread_mutex_t*))
NEXT(int, pthread_cond_timedwait, (pthread_cond_t*, pthread_mutex_t*, const struct timespec*))
NEXT(int, pthread_cond_clockwait,
     (pthread_cond_t*, pthread_mutex_t*, clockid_t, const struct timespec*))
NEXT(long, syscall, (long, ...))
NEXT(void*, PyEval_RestoreThread, (void*))
NEXT(int, PyGILState_Ensure, (void))
NEXT(void, PyEval_AcquireThread, (void*))

int pthread_mutex_lock(pthread_mutex_t* m) {
  count(HPC_LOCK);
  resolve_pthread_mutex_lock();
  return next_pthread_mutex_lock(m);
}
int pthread_mutex_trylock(pthread_mutex_t* m) {
  count(HPC_LOCK);
  resolve_pthread_mutex_trylock();
  return next_pthread_mutex_trylock(m);
}
int pthread_rwlock_rdlock(pthread_rwlock_t* l) {
  count(HPC_LOCK);
  resolve_pthread_rwlock_rdlock();
  return next_pthread_rwlock_rdlock(l);
}
int pthread_rwlock_wrlock(pthread_rwlock_t* l) {
  count(HPC_LOCK);
  resolve_pthread_rwlock_wrlock();
  return next_pthread_rwlock_wrlock(l);
}
int pthread_rwlock_tryrdlock(pthread_rwlock_t* l) {
  count(HPC_LOCK);
  resolve_pthread_rwlock_tryrdlock();
  return next_pthread_rwlock_tryrdlock(l);
}
int pthread_rwlock_trywrlock(pthread_rwlock_t* l) {
  count(HPC_LOCK);
  resolve_pthread_rwlock_trywrlock();
  return next_pthread_rwlock_trywrlock(l);
}
int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) {
  count(HPC_COND_WAIT);
  resolve_pthread_cond_wait();
  return next_pthread_cond_wait(c, m);
}
int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const struct timespec* t) {
  count(HPC_COND_WAIT);
  resolve_pthread_cond_timedwait();
  return next_pthread_cond_timedwait(c, m, t);
}
int pthread_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock,
                           const struct timespec* t) {
  count(HPC_COND_WAIT);
  resolve_pthread_cond_clockwait();
  return next_pthread_cond_clockwait(c, m, clock, t);
}

/* syscall(SYS_futex, addr, op, val, timeout, addr2, val3): libstdc++'s atomic
 * waits and its futex-based mutexes come this way; the rest pass through. */
long syscall(long number, ...) {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (int i = 0; i < 6; ++i) a[i] = va_arg(ap, long);
  va_end(ap);
  if (number == SYS_futex && ((a[1] & FUTEX_CMD_MASK) == FUTEX_WAIT ||
                              (a[1] & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET)) {
    count(HPC_FUTEX_WAIT);
  }
  resolve_syscall();
  return next_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

void* PyEval_RestoreThread(void* state) {
  count(HPC_GIL);
  resolve_PyEval_RestoreThread();
  return next_PyEval_RestoreThread(state);
}
int PyGILState_Ensure(void) {
  count(HPC_GIL);
  resolve_PyGILState_Ensure();
  return next_PyGILState_Ensure();
}
void PyEval_AcquireThread(void* state) {
  count(HPC_GIL);
  resolve_PyEval_AcquireThread();
  next_PyEval_AcquireThread(state);
}
