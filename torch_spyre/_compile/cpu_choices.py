"""Inductor's choices for the device type "cpu" that decide what the C++ code
computes: spyre takes CPU's (docs/compile.md, "CPU's choices").

Spyre's kernels are the C++ backend's, so compiled spyre equals compiled CPU
bit for bit only where inductor (and the decompositions it traces) decide as
they do for CPU. The choices inductor makes inside a decomposition or a
lowering are registered here as spyre's entries of inductor's decomposition
table and lowerings (register_lowering): each dispatches on the device, takes
CPU's branch for spyre and calls torch's own entry for every other device. The
choices made by module functions torch offers no registration for are
torch_spyre/_patches/inductor_as_cpu.py's. Registered once, with inductor's spyre
backend (torch_spyre/_compile/__init__.py), after the patches' ledger checked the
torch functions these entries mirror.
"""

import torch
from torch._decomp.decompositions import pw_cast_for_opmath
from torch._inductor import decomposition, lowering
from torch.fx.experimental.symbolic_shapes import guard_or_false, statically_known_true

from .. import _patches

aten = torch.ops.aten


def _on_spyre(node):
    device = node.get_device() if hasattr(node, "get_device") else None
    return device is not None and device.type == "spyre"


def _register_decomposition(original, replacement, ops=None):
    # Inductor's register_decomposition refuses an op registered already
    # ("duplicate registrations"), so the entry is set in its table: for `ops`,
    # or every overload registered with the function, in the table and in
    # select_decomp_table()'s cached copy.
    for table in (decomposition.decompositions, decomposition.fast_random_decomps()):
        keys = ops if ops is not None else [op for op, fn in table.items() if fn is original]
        for op in keys:
            table[op] = replacement


def _register_lowering(op, replacement_for):
    # register_lowering for every overload (and the packet) registered with
    # torch's lowering, with no type promotion or broadcasting of its own (torch's
    # lowering, which the replacement calls, applies its own).
    original = lowering.lowerings[op]
    keys = [key for key, fn in lowering.lowerings.items() if fn is original]
    lowering.register_lowering(keys, type_promotion_kind=None)(replacement_for(original))


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

    _register_decomposition(original, native_group_norm, ops=[aten.native_group_norm.default])


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

    _register_decomposition(originals["mm"],
                            on_spyre_as_cpu(originals["mm"], mm_as_cpu, (0, "self")))
    _register_decomposition(originals["addmm"],
                            on_spyre_as_cpu(originals["addmm"], addmm_as_cpu, (1, "mat1")))
    _register_decomposition(originals["bmm"],
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

    _register_lowering(torch.ops.aten.bmm.default, bmm_lowering)


def _convolution_bias():
    # kernel/conv.py's convolution lowering: other devices peel the bias off
    # (a convolution without it, then a separate add); CPU passes it to the
    # convolution. The check reads ir.get_device_type(x) once, at the start,
    # so for a spyre convolution with a bias it answers as for CPU on this
    # thread meanwhile (torch_spyre/_patches/inductor_as_cpu.py).
    def convolution_lowering(original):
        def convolution(x, weight, bias, *args, **kwargs):
            if bias is not None and _on_spyre(x):
                with _patches.devices_answer_cpu_for_spyre():
                    return original(x, weight, bias, *args, **kwargs)
            return original(x, weight, bias, *args, **kwargs)

        return convolution

    _register_lowering(torch.ops.aten.convolution.default, convolution_lowering)


def _concatenation():
    # lowering.cat: CPU concatenates int8/uint8 tensors with ATen's cat (its
    # C++ vector code lacks them), other devices with generated kernels. Same
    # values, CPU's kernels.
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

    _register_lowering(aten.cat.default, cat_lowering)


def register_cpus_choices():
    _group_norm()
    _small_matmuls()
    _convolution_bias()
    _concatenation()
