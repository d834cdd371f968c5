// How many intra-op threads spyre's CPU kernels split their work over
// (docs/tensors.md, "Intra-op threads").
#pragma once

namespace spyre {

// The main thread's intra-op thread count (torch.set_num_threads on the main
// thread), as it was at the main thread's latest launch; before that, the
// count the process started with. Every launch takes it, whichever thread
// launches: torch.set_num_threads on another thread changes ATen's default for
// threads started after it (the DataLoader's pin-memory thread sets 1, and
// autograd's spyre device thread then starts with 1), which must not change how
// a kernel splits its work (a reduction's result depends on it).
int kernelThreads();

}  // namespace spyre
