"""Inductor's choices for the device type "cpu" that decide what the C++ code
computes: spyre takes CPU's (docs/compile.md, "CPU's choices").

Spyre's kernels are the C++ backend's, so compiled spyre equals compiled CPU
bit for bit only where inductor (and the decompositions it traces) decide as
they do for CPU. Each patch below names the check it answers, changes nothing
for other devices, and calls torch's own code for spyre too wherever the check
can be answered from outside (group_norm's CPU branch is written out). Applied
once, with inductor's spyre backend (torch_spyre/_compile/inductor.py).
"""

import torch
import torch._prims_common as prims_common
from torch._inductor import config, decomposition, ir, lowering
from torch._inductor.virtualized import ops

aten = torch.ops.aten


def _on_spyre(node):
    device = node.get_device() if hasattr(node, "get_device") else None
    return device is not None and device.type == "spyre"


def _realize_thresholds():
    # ir.is_cpu picks CPU's thresholds for realizing (storing) an intermediate
    # rather than recomputing it (realize_cpu_opcount_threshold,
    # realize_cpu_acc_reads_threshold, reused heavy ops): a stored bfloat16
    # intermediate is rounded, so the choice can change results.
    def is_cpu(x):
        return ir.get_device_type(x) in ("cpu", "spyre")

    ir.is_cpu = is_cpu


def _two_step_variance():
    # use_two_step_variance: two passes (mean, then squares about it) rather
    # than Welford for small reductions. CPU's threshold is
    # config.cpp.use_two_step_variance_threshold, other devices'
    # config.unroll_reductions_threshold; nothing else in the choice differs.
    original = lowering.use_two_step_variance

    def use_two_step_variance(x, axis, keepdim, input_dtype):
        if _on_spyre(x):
            with config.patch(unroll_reductions_threshold=config.cpp.use_two_step_variance_threshold):
                return original(x, axis, keepdim, input_dtype)
        return original(x, axis, keepdim, input_dtype)

    lowering.use_two_step_variance = use_two_step_variance


def _division_by_a_constant():
    # div_prim: other devices multiply by the constant's reciprocal, CPU
    # divides (pytorch/pytorch#157959: the reciprocal is not exact).
    original = lowering.div_prim

    def div_prim(a, b):
        integral = all(lowering.is_boolean_type(v) or lowering.is_integer_type(v) for v in (a, b))
        if not integral and _on_spyre(a) and lowering.get_constant_value(b) is not None:
            return lowering.make_pointwise(lambda *args: ops.truediv(*args))(a, b)
        return original(a, b)

    lowering.div_prim = div_prim  # called by name from div and the pooling lowerings
    # The overload too: registering a packet skips overloads already registered.
    prims_div = lowering.prims.div
    lowering.register_lowering([prims_div, prims_div.default], broadcast=True)(div_prim)


def _group_norm():
    # torch._refs.native_group_norm, inductor's decomposition: with a weight,
    # CPU folds weight, rstd, mean and bias into one scale and one shift per
    # channel (x * w + b); other devices normalize, then scale, then shift.
    original = decomposition.decompositions[aten.native_group_norm.default]

    def native_group_norm(input, weight, bias, batch_size, num_channels, inner_size, num_groups,
                          eps):
        if input.device.type != "spyre" or weight is None:
            return original(input, weight, bias, batch_size, num_channels, inner_size, num_groups,
                            eps)
        per_group = num_channels // num_groups
        x = input.to(torch._prims_common.get_computation_dtype(input.dtype))
        grouped = x.reshape(batch_size, num_groups, per_group, inner_size)
        var, mean = torch.var_mean(grouped, dim=[2, 3], unbiased=False, keepdim=True)
        rstd = torch.rsqrt(var + eps)
        w = rstd * weight.reshape(1, num_groups, per_group, 1)
        b = -mean * w
        if bias is not None:
            b = b + bias.reshape(1, num_groups, per_group, 1)
        w = w.contiguous().as_strided([batch_size, num_channels], [num_channels, 1])
        b = b.contiguous().as_strided([batch_size, num_channels], [num_channels, 1])
        for _ in range(input.ndim - 2):
            w, b = w.unsqueeze(-1), b.unsqueeze(-1)
        out = x * w + b
        return (out.to(input.dtype), mean.to(input.dtype).squeeze([2, 3]),
                rstd.to(input.dtype).squeeze([2, 3]))

    decomposition.decompositions[aten.native_group_norm.default] = native_group_norm
    # select_decomp_table() returns a cached copy, possibly made already.
    decomposition.fast_random_decomps()[aten.native_group_norm.default] = native_group_norm


def _logical_index_argreductions():
    # _make_reduction_inner: an argmax/argmin over several dims of a permuted
    # or non-contiguous tensor must compute logical indices; inductor does so
    # for Triton and for "cpu" with the C++ backend only, so spyre got storage
    # offsets (x.t().argmax() gave 25 for 5). is_triton is the name that
    # check consults; for the call on a spyre node it also answers True.
    original = lowering._make_reduction_inner
    is_triton = lowering.is_triton

    def spyre_or_triton(node):
        return _on_spyre(node) or is_triton(node)

    def make_reduction_inner(x, **kwargs):
        if _on_spyre(x) and str(kwargs.get("reduction_type")).startswith(("argmax", "argmin")):
            lowering.is_triton = spyre_or_triton
            try:
                return original(x, **kwargs)
            finally:
                lowering.is_triton = is_triton
        return original(x, **kwargs)

    lowering._make_reduction_inner = make_reduction_inner


def _arange_accumulation():
    # torch._prims_common.get_acc_type (at::toAccumulateType), used by the
    # arange decomposition: CPU accumulates float32 in float64. Spyre's eager
    # kernels are CPU's, so its accumulation type is CPU's.
    original = prims_common.get_acc_type

    def get_acc_type(dtype, device):
        if torch.device(device).type == "spyre":
            return original(dtype, torch.device("cpu"))
        return original(dtype, device)

    prims_common.get_acc_type = get_acc_type


def take_cpus_choices():
    _realize_thresholds()
    _two_step_variance()
    _division_by_a_constant()
    _group_norm()
    _logical_index_argreductions()
    _arange_accumulation()
