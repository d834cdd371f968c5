"""Feature COMPILE: torch.compile on spyre (inductor). Spyre graphs compile as CPU's do with
inductor's C++ backend (spyre's kernels are that backend's, its eager values CPU's): where
inductor 2.13 decides by device type, these patches give spyre nodes CPU's outcome. Applied
once by torch_spyre/_compile/__init__.py, after check(COMPILE) passed, as inductor's compile_fx
module loads."""

import contextlib
import importlib
import threading

import torch

# What the lowering in progress on this thread asks of the patched checks below: set only
# around one spyre lowering call, read only on the thread that set it.
_lowering_scope = threading.local()


@contextlib.contextmanager
def _scoped(attribute, value):
    previous = getattr(_lowering_scope, attribute, None)
    setattr(_lowering_scope, attribute, value)
    try:
        yield
    finally:
        setattr(_lowering_scope, attribute, previous)


def devices_answer_cpu_for_spyre():
    """While active on this thread, ir.get_device_type answers "cpu" for spyre nodes (the
    convolution lowering's bias check: cpu_choices.py)."""
    return _scoped("spyre_as_cpu", True)


def _on_spyre(node):
    device = node.get_device() if hasattr(node, "get_device") else None
    return device is not None and device.type == "spyre"


# The modules that import get_current_backend by name (the ledger's TARGETS checks that
# torch's are these).
_MODULES_USING_GET_CURRENT_BACKEND = (
    "torch._inductor.utils",
    "torch._inductor.codegen.common",
    "torch._inductor.scheduler",
    "torch._inductor.kernel.mm_common",
)


def apply_inductor_patches():
    """Every inductor patch; called once, after check(COMPILE) passed."""
    import sympy
    from torch._decomp import decompositions as torch_decompositions
    from torch._inductor import config, decomposition, ir, lowering, utils
    from torch._inductor.scheduler import BaseSchedulerNode, Scheduler
    from torch._inductor.virtualized import V, ops

    # get_current_backend, in each module that imported it by name.
    # Why: it picks dtype propagation and low-precision upcasting rules by backend; inductor
    # 2.13 answers "cpp" only for the device type "cpu", and spyre's kernels are the C++
    # backend's (Triton's rules give a KeyError in to_dtype for a bool reduction).
    # Changes: "cpp" for spyre; other devices as before.
    # Retired by: a backend name registered with register_backend_for_device (the scheduling
    # class naming its code generator) that get_current_backend consults.
    original_backend = utils.get_current_backend

    def get_current_backend(device_type=None):
        if not device_type:
            device_type = V.graph.get_current_device_or_throw().type
        return "cpp" if device_type == "spyre" else original_backend(device_type)

    for name in _MODULES_USING_GET_CURRENT_BACKEND:
        module = importlib.import_module(name)
        if getattr(module, "get_current_backend", None) is original_backend:
            module.get_current_backend = get_current_backend

    # BaseSchedulerNode.is_cpu. Why: it skips loop reordering and reindexing the C++ code
    # generation does not support. Changes: true for spyre nodes too. Retired by: a
    # backend feature flag (BackendFeature) the scheduler asks instead of the device type.
    def is_cpu(node):
        device = node.get_device()
        return device is not None and device.type in ("cpu", "spyre")

    BaseSchedulerNode.is_cpu = is_cpu

    # Scheduler.codegen_extern_call. Why: the C++ backend queues a graph's kernel calls until
    # a flush; the scheduler flushes before extern calls on a device, not before device-less
    # ones (streams.synchronize_device, record_event), whose line would precede the kernels
    # scheduled before them. Changes: a flush first, for device-less extern calls in a spyre
    # graph. Retired by: the scheduler flushing before every extern call (upstream fix).
    codegen_extern_call = Scheduler.codegen_extern_call

    def flush_then_codegen_extern_call(scheduler, node):
        current = scheduler.current_device
        if node.get_device() is None and current is not None and current.type == "spyre":
            scheduler.flush()
        codegen_extern_call(scheduler, node)

    Scheduler.codegen_extern_call = flush_then_codegen_extern_call

    # ir.is_cpu. Why: it picks CPU's thresholds for realizing (storing) an intermediate
    # rather than recomputing it (a stored bfloat16 intermediate is rounded). Changes: true
    # for spyre nodes. Retired by: thresholds per registered backend (device_custom_config).
    original_get_device_type = ir.get_device_type

    def ir_is_cpu(x):
        return original_get_device_type(x) in ("cpu", "spyre")

    ir.is_cpu = ir_is_cpu

    # ir.get_device_type. Why: the convolution lowering (kernel/conv.py) peels the bias off
    # for every device type but "cpu", reading ir.get_device_type(x) once; spyre's
    # registered convolution lowering (cpu_choices.py) asks for CPU's answer there.
    # Changes: "cpu" for a spyre node, only on the thread inside that lowering call
    # (devices_answer_cpu_for_spyre); otherwise torch's answer. Retired by: a per-backend
    # choice of keeping the bias in the convolution.
    def get_device_type(x):
        device_type = original_get_device_type(x)
        if device_type == "spyre" and getattr(_lowering_scope, "spyre_as_cpu", False):
            return "cpu"
        return device_type

    ir.get_device_type = get_device_type

    # lowering.use_two_step_variance. Why: two passes (mean, then squares about it) rather
    # than Welford for small reductions: CPU's threshold is
    # config.cpp.use_two_step_variance_threshold, other devices'
    # config.unroll_reductions_threshold. Changes: for spyre, torch's CPU branch (written
    # out: CPU's threshold, no minimum size, no split check). Retired by: the threshold per
    # registered backend.
    original_two_step = lowering.use_two_step_variance

    def use_two_step_variance(x, axis, keepdim, input_dtype):
        if not _on_spyre(x):
            return original_two_step(x, axis, keepdim, input_dtype)
        axis = lowering._validate_reduction_axis(x, axis)
        kwargs = lowering._make_reduction_inner(x, axis=axis, keepdims=keepdim, dtype=None,
                                                override_return_dtype=None)
        reduction_numel = utils.sympy_product(kwargs["reduction_ranges"])
        if not isinstance(reduction_numel, sympy.Integer):
            return False
        return (int(reduction_numel) <= config.cpp.use_two_step_variance_threshold
                and utils.sympy_product(kwargs["ranges"]) != 1)

    lowering.use_two_step_variance = use_two_step_variance

    # lowering.div_prim, and prims.div's lowering. Why: other devices multiply by a
    # constant's reciprocal, CPU divides (pytorch/pytorch#157959: the reciprocal is not
    # exact). Changes: division for spyre. div_prim is called by name from div and the
    # pooling lowerings; prims.div is registered again with it (register_lowering; the
    # overload too: registering a packet skips overloads already registered).
    # Retired by: the choice per registered backend.
    original_div = lowering.div_prim

    def div_prim(a, b):
        integral = all(lowering.is_boolean_type(v) or lowering.is_integer_type(v) for v in (a, b))
        if not integral and _on_spyre(a) and lowering.get_constant_value(b) is not None:
            return lowering.make_pointwise(lambda *args: ops.truediv(*args))(a, b)
        return original_div(a, b)

    lowering.div_prim = div_prim
    prims_div = lowering.prims.div
    lowering.register_lowering([prims_div, prims_div.default], broadcast=True)(div_prim)

    # lowering._make_reduction_inner and ir.is_triton as lowering sees it. Why: an
    # argmax/argmin over several dims of a permuted or non-contiguous tensor must compute
    # logical indices; inductor does so for Triton and for "cpu" with the C++ backend only,
    # so spyre would get storage offsets (x.t().argmax() would give 25 for 5). Changes: for a
    # spyre argmax/argmin, is_triton (the name that check consults) answers True for spyre
    # nodes on this thread during that call; otherwise torch's answer. Retired by: the check
    # asking the registered backend (BackendFeature) instead of the device type.
    original_reduction_inner = lowering._make_reduction_inner
    original_is_triton = lowering.is_triton

    def is_triton(node):
        if getattr(_lowering_scope, "spyre_argreduce", False) and _on_spyre(node):
            return True
        return original_is_triton(node)

    def make_reduction_inner(x, **kwargs):
        if _on_spyre(x) and str(kwargs.get("reduction_type")).startswith(("argmax", "argmin")):
            with _scoped("spyre_argreduce", True):
                return original_reduction_inner(x, **kwargs)
        return original_reduction_inner(x, **kwargs)

    lowering.is_triton = is_triton
    lowering._make_reduction_inner = make_reduction_inner

    # torch._prims_common.get_acc_type (at::toAccumulateType), used by the arange
    # decomposition. Why: CPU accumulates float32 in float64; spyre's eager kernels are
    # CPU's. Changes: CPU's accumulation type for spyre. Retired by: the accumulation type
    # per device (a device-module query).
    original_acc = torch._prims_common.get_acc_type

    def get_acc_type(dtype, device):
        if torch.device(device).type == "spyre":
            return original_acc(dtype, torch.device("cpu"))
        return original_acc(dtype, device)

    torch._prims_common.get_acc_type = get_acc_type

    # lowering._pad_as_cat. Why: CPU never rewrites a right pad as a cat with a filled
    # tensor (its cat would add kernels). Changes: never for spyre either (same values,
    # CPU's kernels). Retired by: the choice per registered backend.
    pad_as_cat = lowering._pad_as_cat

    def _pad_as_cat(x, padding, fill_value):
        return None if _on_spyre(x) else pad_as_cat(x, padding, fill_value)

    lowering._pad_as_cat = _pad_as_cat

    # utils.use_scatter_fallback, imported by name in lowering and decomposition. Why: CPU
    # falls back to ATen's scatter_reduce_ for a "sum" with several threads
    # (config.cpp.fallback_scatter_reduce_sum), where a generated kernel would add
    # atomically in thread order. Changes: spyre's source device answers as CPU's.
    # Retired by: the choice per registered backend.
    original_scatter = utils.use_scatter_fallback

    def use_scatter_fallback(op_overload, reduction_type, self_dtype, src_dtype,
                             src_device_type, src_is_tensor):
        if src_device_type == "spyre":
            src_device_type = "cpu"
        return original_scatter(op_overload, reduction_type, self_dtype, src_dtype,
                                src_device_type, src_is_tensor)

    lowering.use_scatter_fallback = use_scatter_fallback
    decomposition.use_scatter_fallback = use_scatter_fallback

    # torch._decomp.decompositions.native_batch_norm_helper (every batch_norm decomposition
    # calls it by name). Why: in eval mode CPU saves empty statistics, other devices the
    # running ones; CPU saves them in the input's dtype; spyre's eager batch_norm is CPU's.
    # Changes: CPU's saved statistics for spyre inputs. Retired by: the decomposition
    # following the eager kernel's per-device contract (a device query).
    original_batch_norm = torch_decompositions.native_batch_norm_helper

    def native_batch_norm_helper(input, weight, bias, running_mean, running_var, training,
                                 momentum, eps, functional):
        output, save_mean, save_rstd, *running = original_batch_norm(
            input, weight, bias, running_mean, running_var, training, momentum, eps, functional)
        if input.device.type == "spyre":
            if not training:
                save_mean, save_rstd = input.new_zeros((0,)), input.new_zeros((0,))
            save_mean, save_rstd = save_mean.to(dtype=input.dtype), save_rstd.to(dtype=input.dtype)
        return (output, save_mean, save_rstd, *running)

    torch_decompositions.native_batch_norm_helper = native_batch_norm_helper

    # decomposition.decomp_native_layer_norm (torch._refs.native_layer_norm). Why: CPU
    # returns mean and rstd in the input's dtype, other devices in the computation dtype.
    # Changes: the input's dtype for spyre. Retired by: as batch_norm's.
    original_layer_norm = decomposition.decomp_native_layer_norm

    def native_layer_norm(input, normalized_shape, weight, bias, eps):
        out, mean, rstd = original_layer_norm(input, normalized_shape, weight, bias, eps)
        if input.device.type == "spyre":
            mean, rstd = mean.to(dtype=input.dtype), rstd.to(dtype=input.dtype)
        return out, mean, rstd

    decomposition.decomp_native_layer_norm = native_layer_norm
