"""Device layouts (docs/tensors.md, "Device layouts"): upstream torch-spyre's SpyreTensorLayout,
get_device_dtype and DataFormats, Tensor.device_tensor_layout(), device_layout= on Tensor.to and
the factories, and the torch.compile guard on layouts. Default mode here (allocations stay
compact); the card's padded allocations are in test/card_rules_suite.py."""

import copy
import pickle

import pytest
import torch
from torch.spyre import DataFormats, SpyreTensorLayout, get_device_dtype
from torch_spyre.testing import Gate

FP16 = DataFormats.SEN169_FP16


def layout_of(stl):
    return stl.device_size, stl.stride_map


# ------------------------------------------------------------------ the layout rules


@pytest.mark.parametrize("size, dtype, device_size, stride_map", [
    ([], torch.float16, [1, 64], [-1, -1]),
    ([120], torch.float16, [2, 64], [64, 1]),
    ([128], torch.float16, [2, 64], [64, 1]),
    ([512, 240], torch.float16, [4, 512, 64], [64, 240, 1]),
    ([512, 8, 240], torch.float16, [8, 4, 512, 64], [240, 64, 1920, 1]),
    ([2, 3, 4, 70], torch.float16, [3, 4, 2, 2, 64], [280, 70, 64, 840, 1]),
    ([1, 100], torch.float16, [2, 1, 64], [64, -1, 1]),  # a size-1 dimension has no step
    ([0, 5], torch.float16, [1, 0, 64], [64, 5, 1]),
    ([100], torch.float32, [4, 32], [32, 1]),
    ([300], torch.int8, [3, 128], [128, 1]),
    ([10], torch.bool, [1, 64], [64, 1]),  # bool is DLFloat16 on the card
    ([33], torch.uint8, [2, 32], [32, 1]),  # uint8 is 32-bit SENUINT32
    ([5], torch.int64, [1, 32], [32, 1]),  # int64 is stored as int32
    ([5], torch.bfloat16, [1, 64], [64, 1]),
    ([129], torch.float8_e4m3fn, [2, 128], [128, 1]),
    ([2] * 7, torch.float16, [2, 2, 2, 2, 2, 1, 2, 64], [32, 16, 8, 4, 2, 64, 64, 1]),  # rank 7
], ids=str)
def test_the_default_layout(size, dtype, device_size, stride_map):
    assert layout_of(SpyreTensorLayout(size, dtype)) == (device_size, stride_map)


@pytest.mark.parametrize("size, strides, dim_order, device_size, stride_map", [
    ([512, 256], [256, 1], [1, 0], [8, 256, 64], [16384, 1, 256]),
    ([512, 8, 256], [2048, 256, 1], [0, 2, 1], [256, 1, 512, 64], [1, 16384, 2048, 256]),
    ([512, 8, 256], [2048, 256, 1], [2, 1, 0], [8, 8, 256, 64], [256, 131072, 1, 2048]),
    ([4, 6], [1, 4], [1, 0], [1, 6, 64], [64, 4, 1]),  # a transposed host tensor
    ([512, 256], [256, 1], [0, 1, -1], [256, 1, 512, 64], [1, -1, 256, -1]),  # sparse sticks
    ([5], [1], [0, -1], [1, 5, 64], [-1, 1, -1]),
], ids=str)
def test_the_tiling_in_a_dim_order(size, strides, dim_order, device_size, stride_map):
    stl = SpyreTensorLayout(size, strides, torch.float16, dim_order)
    assert layout_of(stl) == (device_size, stride_map)
    assert stl.device_dtype is FP16


def test_a_layout_given_in_full_equals_the_default_it_spells():
    given = SpyreTensorLayout([4, 512, 64], [64, 256, 1], get_device_dtype(torch.float16))
    assert given == SpyreTensorLayout([512, 256], torch.float16)
    keywords = SpyreTensorLayout(device_size=[4, 512, 64], stride_map=[64, 256, 1],
                                 device_dtype=FP16)
    assert keywords == given
    assert SpyreTensorLayout(torch.Size([512, 256]), torch.float16) == given


def test_str_and_repr_are_upstreams_format():
    text = ("SpyreTensorLayout(device_size=[4, 512, 64], stride_map =[64, 256, 1], "
            "device_dtype=DataFormats.SEN169_FP16)")
    stl = SpyreTensorLayout([512, 256], torch.float16)
    assert str(stl) == text
    assert repr(stl) == text


def test_equality_and_hash():
    x = SpyreTensorLayout([512, 256], torch.float16)
    y = SpyreTensorLayout([512, 256], [256, 1], torch.float16, [0, 1])
    z = SpyreTensorLayout([512, 256], [256, 1], torch.float16, [1, 0])
    w = SpyreTensorLayout([512, 256], torch.float32)
    assert x == y and hash(x) == hash(y)
    assert x != z and hash(x) != hash(z)
    assert x != w and layout_of(w) == ([8, 512, 32], [32, 256, 1])
    assert {x: "value"}[y] == "value"
    assert len({x, y, z}) == 2
    assert x != "a layout"


def test_pickle_and_deepcopy_round_trip():
    stl = SpyreTensorLayout([512, 256], [256, 1], torch.float16, [1, 0])
    for other in (pickle.loads(pickle.dumps(stl)), copy.deepcopy(stl), copy.copy(stl)):
        assert other == stl
        assert layout_of(other) == ([8, 256, 64], [16384, 1, 256])


def test_attributes_are_read_only_copies():
    stl = SpyreTensorLayout([120], torch.float16)
    stl.device_size.append(7)  # a copy: the layout is unchanged
    assert stl.device_size == [2, 64]
    with pytest.raises(AttributeError):
        stl.device_size = [1, 64]


def test_device_bytes_and_elems_per_stick():
    assert SpyreTensorLayout([512, 240], torch.float16).device_bytes() == 262144
    assert SpyreTensorLayout([], torch.float16).device_bytes() == 128
    assert SpyreTensorLayout([0, 5], torch.float16).device_bytes() == 0
    assert SpyreTensorLayout([100], torch.float32).elems_per_stick() == 32
    assert SpyreTensorLayout([2, 64], [64, 1], FP16).host_offsets().tolist() == list(range(128))


@pytest.mark.parametrize("dtype, fmt", [
    (torch.float16, "SEN169_FP16"), (torch.bfloat16, "SEN169_FP16"), (torch.bool, "SEN169_FP16"),
    (torch.float32, "IEEE_FP32"), (torch.int8, "SENINT8"), (torch.int16, "SENINT16"),
    (torch.int32, "IEEE_INT32"), (torch.int64, "IEEE_INT32"), (torch.uint8, "SENUINT32"),
    (torch.float8_e4m3fn, "SEN143_FP8"), (torch.float8_e5m2fnuz, "SEN152_FP8"),
    (torch.float64, "INVALID"), (torch.complex64, "INVALID"), (torch.uint16, "INVALID"),
], ids=str)
def test_get_device_dtype(dtype, fmt):
    assert get_device_dtype(dtype) is DataFormats[fmt]
    assert str(get_device_dtype(dtype)) == f"DataFormats.{fmt}"


def test_stick_sizes_of_the_formats():
    assert [DataFormats[name].elems_per_stick() for name in
            ("SEN169_FP16", "IEEE_FP32", "SENINT8", "SENINT4", "SENUINT2", "IEEE_INT64")] == \
        [64, 32, 128, 256, 512, 16]
    with pytest.raises(ValueError, match=r"DataFormats\.SEN153_FP9 has no known stick size"):
        DataFormats.SEN153_FP9.elems_per_stick()


@pytest.mark.parametrize("args, error, message", [
    (([4], torch.float64), ValueError,
     r"a Spyre card has no device format for torch\.float64 \(it has one for torch\.float16"),
    (([4], "float16"), TypeError, r"dtype must be a torch\.dtype, got 'float16'"),
    (([4, -1], torch.float16), ValueError, r"host_size \[4, -1\] has a negative size"),
    (([4, 2.5], torch.float16), TypeError, r"host_size must be a sequence of ints"),
    (([4, 4], [4, 1], torch.float16, [0, 0]), ValueError,
     r"dim_order \[0, 0\] does not fit host_size \[4, 4\]: expected a permutation of 0\.\.1"),
    (([4, 4], [1], torch.float16, [0, 1]), ValueError,
     r"host_strides \[1\] and host_size \[4, 4\] differ in length"),
    (([2, 64], [64], FP16), ValueError, r"must have the same, nonzero length"),
    (([2, 32], [64, 1], FP16), ValueError,
     r"device_size \[2, 32\] must end with 64 \(DataFormats\.SEN169_FP16 elements"),
    (([2, 64], [64, -2], FP16), ValueError, r"stride_map \[64, -2\] has a step below -1"),
    (([2, 64], [64, 1], torch.float16), TypeError, r"device_dtype must be a DataFormats"),
    (([4],), TypeError, r"SpyreTensorLayout\(\) takes \(host_size, dtype\)"),
])
def test_bad_arguments_are_refused_naming_them(args, error, message):
    with pytest.raises(error, match=message):
        SpyreTensorLayout(*args)


def test_get_device_dtype_refuses_a_non_dtype():
    with pytest.raises(TypeError, match=r"get_device_dtype: expected a torch\.dtype, got 'half'"):
        get_device_dtype("half")


# ------------------------------------------------------------------ tensors' layouts


def test_every_spyre_tensor_has_its_default_layout_and_cpu_tensors_none():
    x = torch.empty(512, 240, dtype=torch.float16, device="spyre")
    assert x.device_tensor_layout() == SpyreTensorLayout([512, 240], torch.float16)
    y = torch.rand(512, 256, dtype=torch.float16).to("spyre")
    assert layout_of(y.device_tensor_layout()) == ([4, 512, 64], [64, 256, 1])
    result = x + 1  # an op's result
    assert result.device_tensor_layout() == SpyreTensorLayout([512, 240], torch.float16)
    assert torch.ones(3).device_tensor_layout() is None


def test_views_keep_their_bases_layout():
    x = torch.zeros(512, 240, dtype=torch.float16, device="spyre")
    base = SpyreTensorLayout([512, 240], torch.float16)
    for view in (x[:, :10], x[3], x.t(), x.view(-1), x.detach()[1:]):
        assert view.device_tensor_layout() == base


def test_to_with_a_layout_copies_the_values_and_records_the_layout():
    x = torch.arange(512 * 256, dtype=torch.float32).reshape(512, 256).to(torch.float16)
    stl = SpyreTensorLayout([512, 256], [256, 1], torch.float16, [1, 0])
    on_device = x.to(device_layout=stl)
    assert on_device.device == torch.device("spyre:0")
    assert on_device.device_tensor_layout() == stl
    assert torch.equal(on_device.cpu(), x)
    assert on_device[7:9].device_tensor_layout() == stl  # views share it
    assert on_device.detach().device_tensor_layout() == stl
    assert (on_device + 0).device_tensor_layout() == SpyreTensorLayout([512, 256], torch.float16)


def test_a_resized_storage_drops_its_recorded_layout():
    stl = SpyreTensorLayout([64], [1], torch.float16, [0, -1])  # sparse: not the default
    t = torch.ones(64, dtype=torch.float16).to(device_layout=stl)
    t.resize_(64)  # the storage keeps its size: the layout stays
    assert t.device_tensor_layout() == stl
    t.resize_(200)  # a new, larger storage
    assert t.device_tensor_layout() == SpyreTensorLayout([200], torch.float16)


def test_a_dtype_without_a_device_format_has_no_layout():
    with pytest.raises(ValueError, match=r"a Spyre card has no device format for torch\.float64"):
        torch.ones(3, dtype=torch.float64, device="spyre").device_tensor_layout()


def test_to_with_a_device_a_dtype_and_a_layout():
    x = torch.tensor([[1.5, -2.0, 3.25]])
    stl = SpyreTensorLayout([1, 3], torch.float16)
    for on_device in (x.to("spyre", torch.float16, device_layout=stl),
                      x.to(dtype=torch.float16, device="spyre:0", device_layout=stl),
                      x.to(torch.float16, device_layout=stl)):
        assert on_device.dtype == torch.float16 and on_device.device_tensor_layout() == stl
        assert on_device.cpu().tolist() == [[1.5, -2.0, 3.25]]


@pytest.mark.parametrize("size, strides, device_size, stride_map", [
    ([40, 60], [60, 1], [1, 60, 64], [3840, 1, 60]),
    ([40, 60], [60, 1], [1, 512, 64], [64, 60, 1]),  # padded
    ([40, 60], [60, 1], [38, 64], [64, 1]),  # folded into 38 sticks
    ([60], [1], [1, 512, 64], [64, 0, 1]),  # repeated
    ([60], [1], [2, 1, 2, 64], [15, 64, 30, 1]),
    ([40, 60], [60, 1], [2, 12, 1, 2, 64], [720, 60, 64, 1200, 1]),  # tiled
    ([40, 60], [1, 40], [1, 60, 64], [64, 40, 1]),  # a permuted host tensor
], ids=str)
def test_layouts_given_in_full_round_trip_every_value(size, strides, device_size, stride_map):
    x = torch.empty_strided(size, strides, dtype=torch.float16)
    x.copy_(torch.arange(x.numel(), dtype=torch.float32).reshape(size) / 8)
    stl = SpyreTensorLayout(device_size, stride_map, FP16)
    on_device = x.to(device_layout=stl)
    assert on_device.stride() == tuple(strides)
    assert torch.equal(on_device.cpu(), x)


def test_a_device_tensor_is_relaid_out_by_a_copy_and_kept_when_its_layout_matches():
    default = SpyreTensorLayout([64, 128], torch.float16)
    transposed = SpyreTensorLayout([64, 128], [128, 1], torch.float16, [1, 0])
    x = torch.randn(64, 128, dtype=torch.float16, device="spyre")
    assert x.to(device_layout=default) is x
    copied = x.to(device_layout=default, copy=True)
    assert copied is not x and copied.data_ptr() != x.data_ptr()
    relaid = x.to(device_layout=transposed)
    assert relaid is not x and relaid.device_tensor_layout() == transposed
    assert x.device_tensor_layout() == default
    assert torch.equal(relaid.cpu(), x.cpu())
    assert relaid.to("spyre", device_layout=transposed) is relaid


def test_to_with_a_layout_is_differentiable():
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    on_device = x.to(device_layout=SpyreTensorLayout([3], torch.float32))
    (on_device * on_device).sum().backward()
    assert x.grad.tolist() == [2.0, 4.0, 6.0]


def test_to_with_a_layout_is_queued_on_the_current_stream():
    x = torch.arange(256, dtype=torch.float16).pin_memory()
    stl = SpyreTensorLayout([256], torch.float16)
    stream = torch.spyre.Stream()
    with stream, Gate() as gate:
        gate.block()
        on_device = x.to(device_layout=stl, non_blocking=True)  # does not wait for the gate
        assert not stream.query()
        gate.release()
        stream.synchronize()
    assert torch.equal(on_device.cpu(), torch.arange(256, dtype=torch.float16))


@pytest.mark.parametrize("factory, args, values", [
    (torch.empty, ((2, 3),), None),
    (torch.zeros, (2, 3), [[0.0] * 3] * 2),
    (torch.ones, ((2, 3),), [[1.0] * 3] * 2),
    (torch.full, ((2, 3), 2.5), [[2.5] * 3] * 2),
], ids=lambda v: getattr(v, "__name__", None))
def test_factories_take_a_layout(factory, args, values):
    stl = SpyreTensorLayout([2, 3], [3, 1], torch.float32, [1, 0])
    t = factory(*args, device_layout=stl)
    assert (t.device.type, t.dtype, t.shape) == ("spyre", torch.float32, (2, 3))
    assert t.device_tensor_layout() == stl
    if values is not None:
        assert t.cpu().tolist() == values
    assert factory(*args).device.type == "cpu"  # without the keyword: torch's own


def test_upstreams_empty_with_a_layout():
    stl = SpyreTensorLayout([512, 8, 256], [2048, 256, 1], torch.float16, [2, 1, 0])
    x = torch.empty((512, 8, 256), device_layout=stl, dtype=torch.float16)
    assert layout_of(x.device_tensor_layout()) == ([8, 8, 256, 64], [256, 131072, 1, 2048])
    g = torch.zeros(2, 64, dtype=torch.float16, requires_grad=True,
                    device_layout=SpyreTensorLayout([2, 64], torch.float16))
    assert g.requires_grad and g.is_leaf


def test_by_default_a_layout_keeps_allocations_compact(empty_device):
    x = torch.empty(512, 240, dtype=torch.float16, device="spyre")
    assert x.untyped_storage().nbytes() == 245760
    y = torch.empty(40, 60, dtype=torch.float16,
                    device_layout=SpyreTensorLayout([1, 512, 64], [64, 60, 1], FP16))
    assert y.untyped_storage().nbytes() == 4800
    assert torch.accelerator.memory_allocated() == 245760 + 5120  # blocks of 512 bytes


@pytest.mark.parametrize("call, error, message", [
    (lambda stl: torch.ones(100, dtype=torch.float16).to(device_layout=stl), ValueError,
     r"does not hold every element of a tensor of size \[100\] and strides \[1\]: host offset "
     r"64 has no place in it"),
    (lambda stl: torch.ones(64).to(device_layout=stl), ValueError,
     r"does not fit a tensor of dtype torch\.float32: its device_dtype must be "
     r"DataFormats\.IEEE_FP32"),
    (lambda stl: torch.ones(64, dtype=torch.float16).to("cpu", device_layout=stl), ValueError,
     r"device_layout= describes spyre device memory; got device cpu"),
    (lambda stl: torch.empty(64, dtype=torch.float16, device="cpu", device_layout=stl),
     ValueError, r"got device cpu"),
    (lambda stl: torch.ones(64, dtype=torch.float16).to(device_layout=[1, 64]), TypeError,
     r"device_layout must be a torch\.spyre\.SpyreTensorLayout, got \[1, 64\]"),
    (lambda stl: torch.ones(64, dtype=torch.float16).to(device_layout=stl, non_block=True),
     TypeError, r"to\(\) got an unexpected keyword argument 'non_block'"),
    (lambda stl: torch.ones(64, dtype=torch.float16).to(
        device_layout=stl, memory_format=torch.channels_last), ValueError,
     r"memory_format torch\.preserve_format or torch\.contiguous_format"),
    (lambda stl: torch.empty(64, dtype=torch.float16, out=torch.empty(0), device_layout=stl),
     TypeError, r"cannot be combined with out="),
])
def test_a_layout_that_does_not_fit_is_refused_and_nothing_is_allocated(call, error, message,
                                                                         empty_device):
    stl = SpyreTensorLayout([1, 64], [64, 1], FP16)
    with pytest.raises(error, match=message):
        call(stl)
    assert torch.accelerator.memory_allocated() == 0


# ------------------------------------------------------------------ torch.compile


def test_a_layout_change_recompiles_and_the_same_layout_does_not(fresh_dynamo):
    from torch._dynamo.utils import counters

    x = torch.rand(64, 128, dtype=torch.float16)
    plain = x.to("spyre")  # its default layout
    transposed = SpyreTensorLayout([64, 128], [128, 1], torch.float16, [1, 0])
    other = x.to(device_layout=transposed)
    counters.clear()
    compiled = torch.compile(lambda a: a + a)
    assert torch.equal(compiled(plain).cpu(), x + x)
    assert counters["stats"]["calls_captured"] == 1
    assert torch.equal(compiled(other).cpu(), x + x)
    assert counters["stats"]["calls_captured"] == 2  # a new layout: traced again
    compiled(other)
    compiled(x.to(device_layout=copy.deepcopy(transposed)))  # an equal layout
    compiled(plain)
    compiled(x.to("spyre"))  # another tensor with the same default layout
    assert counters["stats"]["calls_captured"] == 2


def test_default_layouts_of_new_shapes_reuse_a_dynamic_graph(fresh_dynamo):
    from torch._dynamo.utils import counters

    counters.clear()
    compiled = torch.compile(lambda a: a * 2, dynamic=True)
    for n in (8, 16, 24):
        assert compiled(torch.ones(n, device="spyre")).cpu().tolist() == [2.0] * n
    assert counters["stats"]["calls_captured"] == 1


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_torchscript_compiles_the_wrapped_factories_as_their_aten_ops():
    def make(n: int):
        return torch.zeros(n) + torch.ones(n) + torch.full([n], 2.0) + torch.empty(n).zero_()

    assert torch.jit.script(make)(3).tolist() == [3.0, 3.0, 3.0]
