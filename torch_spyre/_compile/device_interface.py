"""Dynamo's view of the spyre device (torch._dynamo.device_interface).

With it, dynamo traces torch.spyre.Stream, torch.spyre.stream(...),
current_stream() and torch.Event/torch.Stream on spyre as it traces CUDA's.
"""

import multiprocessing
from collections import namedtuple

from torch._dynamo.device_interface import DeviceInterface, caching_worker_current_devices

import torch_spyre as spyre

_WorkerProperties = namedtuple("_WorkerProperties", ["multi_processor_count"])


class SpyreInterface(DeviceInterface):
    device = spyre.device
    Event = spyre.Event
    Stream = spyre.Stream

    class Worker:
        """Device facts for inductor's compile workers, which must not start the runtime."""

        @staticmethod
        def set_device(device):
            caching_worker_current_devices["spyre"] = device

        @staticmethod
        def current_device():
            return caching_worker_current_devices.get("spyre", 0)

        @staticmethod
        def get_device_properties(device=None):
            # Kernels are the CPU backend's C++: they parallelize over host cores.
            return _WorkerProperties(multiprocessing.cpu_count())

    current_device = staticmethod(spyre.current_device)
    set_device = staticmethod(spyre.set_device)
    device_count = staticmethod(spyre.device_count)
    is_available = staticmethod(spyre.is_available)
    stream = staticmethod(spyre.stream)
    current_stream = staticmethod(spyre.current_stream)
    set_stream = staticmethod(spyre.set_stream)
    synchronize = staticmethod(spyre.synchronize)
    memory_allocated = staticmethod(spyre.memory_allocated)

    @staticmethod
    def _set_stream_by_id(stream_id, device_index, device_type):
        spyre.set_stream(spyre.Stream._wrap((stream_id, device_index)))

    @staticmethod
    def exchange_device(device):
        previous = spyre.current_device()
        if device >= 0 and device != previous:
            spyre.set_device(device)
        return previous

    maybe_exchange_device = exchange_device

    @staticmethod
    def get_raw_stream(device_index):
        # The stream id: spyre kernels resolve the current stream themselves.
        return spyre.current_stream(device_index).stream_id

    @staticmethod
    def get_compute_capability(device=None):
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation=False):
        return True

    @staticmethod
    def is_triton_capable(device=None):
        return False
