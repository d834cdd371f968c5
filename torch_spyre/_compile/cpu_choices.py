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
import torch._decomp.decompositions
import torch._prims_common as prims_common
from torch._decomp.decompositions import pw_cast_for_opmath
from torch._inductor import config, decomposition, ir, lowering, utils
from torch._inductor.virtualized import ops
from torch.fx.experimental.symbolic_shapes import guard_or_false, statically_known_true

aten = torch.ops.aten


def _on_spyre(node):
    device = node.get_device() if hasattr(node, "get_device") else None
    return device is not None and device.type == "spyre"


def _replace_decomposition(original, replacement):
    # Every overload registered with the function, and select_decomp_table()'s
    # cached copy, possibly made already.
    for table in (decomposition.decompositions, decomposition.fast_random_decomps()):
        for op in [op for op, fn in table.items() if fn is original]:
            table[op] = replacement


def _replace_lowering(op, replacement_for):
    # Every overload (and the packet) registered with the lowering.
    original = lowering.lowerings[op]
    replacement = replacement_for(original)
    for key in [key for key, fn in lowering.lowerings.items() if fn is original]:
        lowering.lowerings[key] = replacement


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


def _small_matmuls():
    # inductor's decompositions of mm, addmm and bmm: CPU turns a dot product
    # (1,k)x(k,1), a tiny mm/addmm and an outer product of at most 32
    # elements into multiply-and-sum kernels and leaves the rest to ATen;
    # other devices decompose every outer product, an addmm with k == 1 and,
    # under coordinate descent tuning, matrix-vector products. The branches
    # below are CPU's, for spyre tensors.
    sk = statically_known_true
    originals = {name: getattr(decomposition, name) for name in ("mm", "addmm", "bmm")}

    @pw_cast_for_opmath
    def mm_as_cpu(self, input2, out_dtype=None):
        if (sk(self.size(-1) == 1) and sk(self.size(0) != 1) and sk(input2.size(1) != 1)
                and sk(self.size(0) > 0) and sk(input2.size(0) == 1)
                and self.dtype == input2.dtype
                and guard_or_false((torch.numel(self) + torch.numel(input2)) <= 32)):
            return self * input2
        if sk(self.size(0) == 1) and sk(input2.size(-1) == 1):
            return torch.sum(self.squeeze(0) * input2.squeeze(-1), dim=0, keepdim=True).unsqueeze(0)
        return NotImplemented

    @pw_cast_for_opmath
    def addmm_as_cpu(self, mat1, mat2, out_dtype=None, beta=1, alpha=1):
        if sk(mat1.size(0) == 1) and sk(mat2.size(-1) == 1):
            out = torch.sum(mat1.squeeze(0) * mat2.squeeze(-1), dim=0, keepdim=True).unsqueeze(0)
            return alpha * out + beta * self
        if sk(mat1.size(0) == 1) and guard_or_false(mat2.size(0) <= 16) and guard_or_false(
                mat2.size(1) <= 16):
            return alpha * (mat1.T * mat2).sum(dim=0, keepdim=True) + beta * self
        return NotImplemented

    @pw_cast_for_opmath
    def bmm_as_cpu(self, batch2, out_dtype=None):
        if sk(self.shape[2] == 1) and sk(batch2.shape[1] == 1):
            return (self * batch2).contiguous()
        if sk(self.size(1) == 1) and sk(batch2.size(-1) == 1):
            return torch.sum(self.squeeze(1) * batch2.squeeze(-1), dim=1, keepdim=True).unsqueeze(1)
        return NotImplemented

    def on_spyre_as_cpu(original, as_cpu, operand):
        # operand: the (position, name) of the tensor whose device torch checks.
        def decompose(*args, **kwargs):
            position, name = operand
            tensor = args[position] if len(args) > position else kwargs.get(name)
            if isinstance(tensor, torch.Tensor) and tensor.device.type == "spyre":
                return as_cpu(*args, **kwargs)
            return original(*args, **kwargs)

        return decompose

    _replace_decomposition(originals["mm"],
                           on_spyre_as_cpu(originals["mm"], mm_as_cpu, (0, "self")))
    _replace_decomposition(originals["addmm"],
                           on_spyre_as_cpu(originals["addmm"], addmm_as_cpu, (1, "mat1")))
    _replace_decomposition(originals["bmm"],
                           on_spyre_as_cpu(originals["bmm"], bmm_as_cpu, (0, "self")))

    # kernel/bmm.py's tuned_bmm: on CPU, a bmm with one row or one column per
    # batch is a multiply-and-sum (the decomposition above takes only both).
    def bmm_lowering(original):
        def tuned_bmm(mat1, mat2, *args, **kwargs):
            if (_on_spyre(mat1) and _on_spyre(mat2)
                    and (mat1.get_size()[1] == 1 or mat2.get_size()[2] == 1)):
                return lowering.sum_(lowering.mul(lowering.unsqueeze(mat1, -1),
                                                  lowering.unsqueeze(mat2, 1)), axis=2)
            return original(mat1, mat2, *args, **kwargs)

        return tuned_bmm

    _replace_lowering(torch.ops.aten.bmm.default, bmm_lowering)


def _convolution_bias():
    # kernel/conv.py's convolution lowering: other devices peel the bias off
    # (a convolution without it, then a separate add); CPU passes it to the
    # convolution. The check reads ir.get_device_type(x) once, at the start,
    # so for a spyre convolution with a bias it answers as for CPU meanwhile.
    get_device_type = ir.get_device_type

    def cpu_for_spyre(x):
        device_type = get_device_type(x)
        return "cpu" if device_type == "spyre" else device_type

    def convolution_lowering(original):
        def convolution(x, weight, bias, *args, **kwargs):
            if bias is not None and _on_spyre(x):
                ir.get_device_type = cpu_for_spyre
                try:
                    return original(x, weight, bias, *args, **kwargs)
                finally:
                    ir.get_device_type = get_device_type
            return original(x, weight, bias, *args, **kwargs)

        return convolution

    _replace_lowering(torch.ops.aten.convolution.default, convolution_lowering)


def _scatter_reduce_sum():
    # utils.use_scatter_fallback: CPU falls back to ATen's scatter_reduce_ for
    # a "sum" with several threads (config.cpp.fallback_scatter_reduce_sum),
    # where a generated kernel would add atomically in thread order. Spyre's
    # source device answers as CPU's ("spyre" is not a GPU type either).
    original = utils.use_scatter_fallback

    def use_scatter_fallback(op_overload, reduction_type, self_dtype, src_dtype, src_device_type,
                             src_is_tensor):
        if src_device_type == "spyre":
            src_device_type = "cpu"
        return original(op_overload, reduction_type, self_dtype, src_dtype, src_device_type,
                        src_is_tensor)

    lowering.use_scatter_fallback = use_scatter_fallback  # imported by name in both
    decomposition.use_scatter_fallback = use_scatter_fallback


def _concatenation():
    # lowering.cat: CPU concatenates int8/uint8 tensors with ATen's cat (its
    # C++ vector code lacks them), other devices with generated kernels.
    # lowering._pad_as_cat: CPU never rewrites a right pad as a cat with a
    # filled tensor (its cat would add kernels). Same values, CPU's kernels.
    def cat_lowering(original):
        def cat(inputs, dim=0):
            if _on_spyre(inputs[0]) and all(t.get_dtype() in (torch.int8, torch.uint8)
                                            for t in inputs):
                for t in inputs:
                    t.realize()
                if all(len(t.get_size()) == 4 for t in inputs):
                    inputs, _ = lowering.require_channels_last(aten.cat, *inputs)
                return lowering.fallback_handler(aten.cat.default)(inputs, dim)
            return original(inputs, dim)

        return cat

    _replace_lowering(aten.cat.default, cat_lowering)

    pad_as_cat = lowering._pad_as_cat

    def _pad_as_cat(x, padding, fill_value):
        return None if _on_spyre(x) else pad_as_cat(x, padding, fill_value)

    lowering._pad_as_cat = _pad_as_cat


def _batch_norm_statistics():
    # torch._decomp's native_batch_norm_helper (every batch_norm
    # decomposition calls it by name): in eval mode CPU saves empty
    # statistics, other devices the running ones; CPU saves them in the
    # input's dtype. Spyre's eager batch_norm is CPU's, so without this a
    # compiled native_batch_norm gave (C,) statistics where eager gives (0,).
    original = torch._decomp.decompositions.native_batch_norm_helper

    def native_batch_norm_helper(input, weight, bias, running_mean, running_var, training,
                                 momentum, eps, functional):
        output, save_mean, save_rstd, *running = original(
            input, weight, bias, running_mean, running_var, training, momentum, eps, functional)
        if input.device.type == "spyre":
            if not training:
                save_mean, save_rstd = input.new_zeros((0,)), input.new_zeros((0,))
            save_mean, save_rstd = save_mean.to(dtype=input.dtype), save_rstd.to(dtype=input.dtype)
        return (output, save_mean, save_rstd, *running)

    torch._decomp.decompositions.native_batch_norm_helper = native_batch_norm_helper


def _layer_norm_statistics():
    # torch._refs.native_layer_norm (inductor's decomposition calls it as
    # decomp_native_layer_norm): CPU returns mean and rstd in the input's
    # dtype, other devices in the computation dtype (float32 for bfloat16).
    original = decomposition.decomp_native_layer_norm

    def native_layer_norm(input, normalized_shape, weight, bias, eps):
        out, mean, rstd = original(input, normalized_shape, weight, bias, eps)
        if input.device.type == "spyre":
            mean, rstd = mean.to(dtype=input.dtype), rstd.to(dtype=input.dtype)
        return out, mean, rstd

    decomposition.decomp_native_layer_norm = native_layer_norm


def take_cpus_choices():
    _realize_thresholds()
    _two_step_variance()
    _division_by_a_constant()
    _group_norm()
    _logical_index_argreductions()
    _arange_accumulation()
    _small_matmuls()
    _convolution_bias()
    _scatter_reduce_sum()
    _concatenation()
    _batch_norm_statistics()
    _layer_norm_statistics()
