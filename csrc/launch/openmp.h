// libgomp's entry points, loaded with libtorch_cpu. The extension is not built
// with -fopenmp (that would link a second OpenMP runtime beside torch's), so
// it calls the runtime torch uses directly.
#pragma once

extern "C" {
int omp_get_max_threads();
void omp_set_num_threads(int);
int omp_get_thread_num();
// What `#pragma omp parallel` compiles to: every thread of the calling
// thread's team (`num_threads` of them) runs `fn(data)`.
void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags);
}
