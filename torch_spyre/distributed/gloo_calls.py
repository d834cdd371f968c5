"""gloo's collectives as spyreccl issues them: through `_C` bindings that hand
gloo aliases made in C++, never tensors with a Python object
(csrc/python/collective_bindings.cpp; docs/distributed.md, "Exit").

gloo's worker threads release a finished work's tensors after its future has
completed; a tensor with a Python object then takes the GIL. Late enough (a
busy machine, the script's last collective), that falls inside Py_FinalizeEx
and ends the process with std::terminate. The aliases share the tensors'
storage, so gloo reads and writes the same memory."""

from torch.spyre import _C


class GlooCalls:
    """The methods of a gloo backend that take tensors, with its Python names
    and arguments (options may be omitted: gloo's defaults)."""

    def __init__(self, gloo):
        self.backend = gloo

    def size(self) -> int:
        return self.backend.size()

    def barrier(self, opts):
        return self.backend.barrier(opts)  # no tensors

    def allreduce(self, tensors, opts=None):
        return _C._gloo_allreduce(self.backend, tensors, opts)

    def allreduce_coalesced(self, tensors, opts=None):
        return _C._gloo_allreduce_coalesced(self.backend, tensors, opts)

    def broadcast(self, tensors, opts=None):
        return _C._gloo_broadcast(self.backend, tensors, opts)

    def reduce(self, tensors, opts=None):
        return _C._gloo_reduce(self.backend, tensors, opts)

    def allgather(self, outputs, inputs, opts=None):
        return _C._gloo_allgather(self.backend, outputs, inputs, opts)

    def allgather_coalesced(self, outputs, inputs, opts=None):
        return _C._gloo_allgather_coalesced(self.backend, outputs, inputs, opts)

    def _allgather_base(self, output, input, opts=None):
        return _C._gloo_allgather_base(self.backend, output, input, opts)

    def gather(self, outputs, inputs, opts=None):
        return _C._gloo_gather(self.backend, outputs, inputs, opts)

    def scatter(self, outputs, inputs, opts=None):
        return _C._gloo_scatter(self.backend, outputs, inputs, opts)

    def reduce_scatter(self, outputs, inputs, opts=None):
        return _C._gloo_reduce_scatter(self.backend, outputs, inputs, opts)

    def _reduce_scatter_base(self, output, input, opts=None):
        return _C._gloo_reduce_scatter_base(self.backend, output, input, opts)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return _C._gloo_alltoall_base(
            self.backend, output, input, output_split_sizes, input_split_sizes, opts
        )

    def alltoall(self, outputs, inputs, opts=None):
        return _C._gloo_alltoall(self.backend, outputs, inputs, opts)

    def send(self, tensors, dst_rank, tag):
        return _C._gloo_send(self.backend, tensors, dst_rank, tag)

    def recv(self, tensors, src_rank, tag):
        return _C._gloo_recv(self.backend, tensors, src_rank, tag)

    def recv_anysource(self, tensors, tag):
        return _C._gloo_recv_anysource(self.backend, tensors, tag)
