"""The outputs `reduce-overhead` hands out from a spyre graph's fixed memory
(docs/graphs.md, "reduce-overhead").

A graph writes its outputs into the same memory at every replay. As CUDA's graph trees do,
each call returns fresh tensors over that memory, each with a storage of its own, so that
whether the caller still holds a call's outputs is known from weak references to those
storages: a graph whose outputs are alive is not replayed over them.

The memory is owned by the tensors the capture made (`Owners`). A handed-out storage is made
through DLPack, whose deleter holds the owner: outputs the caller keeps stay valid after the
graph itself is gone (dynamo's reset), and the memory is freed with the last of them.
"""

import weakref

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.dlpack import from_dlpack, to_dlpack

_by_ptr = weakref.WeakValueDictionary()  # data_ptr -> the Owners holding that memory


class Owners:
    """A graph's output storages (by data pointer) and weak references to every storage
    handed out over them."""

    def __init__(self, storages):
        # Each storage as a flat byte tensor, the shape DLPack exports.
        self.flat = {ptr: torch.empty(0, dtype=torch.uint8, device=s.device).set_(s)
                     for ptr, s in storages.items()}
        self.handed_out = []  # StorageWeakRef of each storage returned to a caller
        for ptr in storages:
            _by_ptr[ptr] = self

    def alias(self, ptr):
        """A fresh storage over the memory at `ptr` that keeps its owner alive, tracked."""
        storage = from_dlpack(to_dlpack(self.flat[ptr])).untyped_storage()
        self.handed_out = [r for r in self.handed_out if not r.expired()]
        self.handed_out.append(StorageWeakRef(storage))
        return storage

    def any_alive(self):
        return any(not r.expired() for r in self.handed_out)


def owning_storage(tensor):
    """The storage owning `tensor`'s memory if a graph's output made it, else None."""
    ptr = tensor.untyped_storage().data_ptr()
    owners = _by_ptr.get(ptr)
    return None if owners is None else owners.flat[ptr].untyped_storage()
