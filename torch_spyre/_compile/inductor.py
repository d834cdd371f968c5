"""Inductor's backend for spyre (docs/compile.md).

Code generation is the CPU backend's (C++ with ATen's vector types); what
differs is where kernels run. The Python wrapper defines each kernel with
``spyre_kernels.cpp_kernel`` instead of ``async_compile.cpp_pybinding``, so a
kernel call queues the kernel on the current spyre stream (kernels.py) rather
than running it on the host. Buffers are ``empty_strided(..., device='spyre')``
(the caching allocator) and extern kernels (mm, convolution, ...) are ATen
calls on spyre tensors, which the launch path also queues on the stream.
"""

from torch._inductor.codegen.common import (
    DeviceOpOverrides,
    register_backend_for_device,
    register_device_op_overrides,
)
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen
from torch._inductor.stream_constants import DEFAULT_STREAM, DEFAULT_STREAM_IDX, STREAM_NAME_TEMPLATE
from torch._inductor.virtualized import V

from .cache_key import SpyreCodegenVersion

_SPYRE_SOURCE_MARK = "// spyre kernel\n"


class Scheduling(CppScheduling):
    """The C++ backend's scheduling, for the nodes on spyre.

    Inductor makes one scheduling object per device, so in a graph with CPU
    work beside spyre work the CPU nodes keep CPU's (kernels called on the
    host, ``async_compile.cpp_pybinding``) and only these define spyre
    kernels. The mark keeps a spyre kernel's source apart from a CPU kernel's
    with the same loops: the wrapper shares one definition per source text.
    """

    def define_kernel(self, src_code, nodes, kernel_args=None):
        wrapper = V.graph.wrapper_code
        wrapper.defining_spyre_kernel = True
        try:
            return super().define_kernel(_SPYRE_SOURCE_MARK + src_code, nodes, kernel_args)
        finally:
            wrapper.defining_spyre_kernel = False


class SpyreDeviceOpOverrides(DeviceOpOverrides):
    """The device calls the Python wrapper writes: torch.spyre's."""

    def import_get_raw_stream_as(self, name):
        return f"def {name}(index):\n    return torch.spyre.current_stream(index).stream_id\n"

    def set_device(self, device_idx):
        return f"torch.spyre.set_device({device_idx})"

    def synchronize(self):
        return "torch.spyre.synchronize()"

    def device_guard(self, device_idx):
        return f"torch.spyre.device({device_idx})"


register_device_op_overrides("spyre", SpyreDeviceOpOverrides())

_CPU_DEFINITION = "async_compile.cpp_pybinding("
_EXTERNAL_OBJECTS = "from torch._dynamo.graph_bytecode_inputs import get_external_object_by_index"


def _define_on_spyre(kernel_name, kernel_body):
    if kernel_body.startswith(_CPU_DEFINITION):
        return f"spyre_kernels.cpp_kernel({kernel_name!r}, " + kernel_body[len(_CPU_DEFINITION):]
    return kernel_body


class _SpyreKernels:
    """Kernel definitions of the spyre wrappers (graphs and subgraphs)."""

    # Set by Scheduling.define_kernel: CPU kernels of a mixed-device graph
    # stay CPU's.
    defining_spyre_kernel = False

    def define_kernel(self, kernel_name, kernel_body, *args, **kwargs):
        if self.defining_spyre_kernel:
            kernel_body = _define_on_spyre(kernel_name, kernel_body)
        super().define_kernel(kernel_name, kernel_body, *args, **kwargs)

    def _generate_kernel_call_helper(self, kernel_name, call_args, *, device=None, triton=True,
                                     **kwargs):
        device = device or V.graph.get_current_device_or_throw()
        if not triton and device.type == "spyre":
            # A plain call: the kernel object queues itself on the current stream.
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device,
                                             triton=triton, **kwargs)


class SpyreSubgraphWrapperCodegen(_SpyreKernels, SubgraphPythonWrapperCodegen):
    pass


class SpyreWrapperCodegen(_SpyreKernels, PythonWrapperCodegen):
    def write_header(self):
        super().write_header()
        self.imports.writeline("from torch_spyre._compile import kernels as spyre_kernels")

    def codegen_cuda_stream_enter(self, stream_idx):
        # Graphs with user streams (`with torch.spyre.stream(s)` traced by
        # dynamo) switch streams with `with stream<i>:`. Inductor declares those
        # names in the device guard it opens for GPUs only; spyre declares each
        # before its first use, which is never inside another stream's context
        # (inductor exits one before entering the next).
        declared = self.__dict__.setdefault("_declared_streams", set())
        if stream_idx not in declared:
            declared.add(stream_idx)
            name = STREAM_NAME_TEMPLATE.format(stream_idx=stream_idx)
            if stream_idx == DEFAULT_STREAM_IDX:
                self.writeline(f"{DEFAULT_STREAM} = torch.spyre.current_stream()")
            else:
                if not self.imports.contains(_EXTERNAL_OBJECTS):
                    self.imports.writeline(_EXTERNAL_OBJECTS)
                index = V.graph.scheduler.stream_idx_to_user_obj_idx[stream_idx]
                self.writeline(f"{name} = get_external_object_by_index({index})")
        return super().codegen_cuda_stream_enter(stream_idx)

    @staticmethod
    def create(is_subgraph, subgraph_name, parent_wrapper, partition_signatures=None):
        if is_subgraph:
            return SpyreSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return SpyreWrapperCodegen()


def _refused(option):
    class Refused:
        """A wrapper that would call kernels on the host, not on a stream: refused."""

        supports_caching = False

        @staticmethod
        def create(*args, **kwargs):
            raise NotImplementedError(
                f"torch.compile on spyre: torch._inductor.config.{option}=True is not supported "
                "(that wrapper would run kernels on the host, not on the current spyre stream); "
                "use the default Python wrapper")

    return Refused


CppWrapperRefused = _refused("cpp_wrapper")
FxWrapperRefused = _refused("fx_wrapper")


def register_backend():
    """Spyre's code generators, and the pass that puts spyre's code generation into inductor's
    cache key (cache_key.py), with inductor's registration (before inductor would look for
    them itself: init_backend_registration registers nothing for a device registered
    already)."""
    register_backend_for_device("spyre", Scheduling, SpyreWrapperCodegen, CppWrapperRefused,
                                FxWrapperRefused, device_custom_pass=SpyreCodegenVersion())


def register_disabled_backend(reason):
    """A backend that refuses to compile, naming why (torch_spyre/_patches/ disabled
    torch.compile on spyre): code generation is never reached on a path the patches were
    not checked for."""
    message = reason

    class DisabledScheduling:
        def __init__(self, scheduler):
            raise RuntimeError(message)

    class DisabledWrapper:
        supports_caching = False

        @staticmethod
        def create(*args, **kwargs):
            raise RuntimeError(message)

    register_backend_for_device("spyre", DisabledScheduling, DisabledWrapper, DisabledWrapper,
                                DisabledWrapper)
