"""Issue 17: torch.save / torch.load of spyre tensors, modules and optimizers,
with every map_location form. Values are compared exactly (on the host)."""

import io
import pickle

import pytest
import torch
from torch import nn

from conftest import run_python

SPYRE = torch.device("spyre:0")
CPU = torch.device("cpu")

# Every map_location form that puts a checkpoint on spyre:0.
TO_SPYRE = {
    "none": None,  # only for checkpoints saved on spyre
    "str": "spyre",
    "str_index": "spyre:0",
    "device": torch.device("spyre"),
    "device_index": torch.device("spyre:0"),
    "dict": {"spyre:0": "spyre:0", "cpu": "spyre:0"},
    "callable": lambda storage, location: storage.spyre(),
    "callable_none": lambda storage, location: None,  # None: the default restore
}
TO_SPYRE_FROM_CPU = {k: v for k, v in TO_SPYRE.items() if k not in ("none", "callable_none")}
TO_CPU = {
    "str": "cpu",
    "device": torch.device("cpu"),
    "dict": {"spyre:0": "cpu"},
    "callable": lambda storage, location: storage.cpu(),
}


def save(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def load(data: bytes, **kwargs):
    return torch.load(io.BytesIO(data), **kwargs)


def tensors():
    """One tensor per dtype, with values that round-trip exactly, plus a view."""
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    return {
        "float32": base,
        "bfloat16": base.to(torch.bfloat16),
        "float16": base.to(torch.float16),
        "float64": base.double(),
        "int64": torch.arange(-12, 12).reshape(4, 6),
        "uint8": torch.arange(24, dtype=torch.uint8),
        "bool": base > 0,
        "complex64": torch.complex(base, -base),
        "transposed": base.t(),  # non-contiguous: strides are kept
        "scalar": torch.tensor(3.25),
        "empty": torch.empty(0, 3),
    }


def assert_same(loaded: torch.Tensor, expected: torch.Tensor, device: torch.device):
    assert loaded.device == device
    assert loaded.dtype == expected.dtype
    assert loaded.shape == expected.shape
    assert loaded.stride() == expected.stride()
    assert torch.equal(loaded.cpu(), expected.cpu())


@pytest.mark.parametrize("form", TO_SPYRE)
@pytest.mark.parametrize("weights_only", [False, True])
def test_spyre_tensors_round_trip_onto_spyre(form, weights_only):
    expected = tensors()
    on_spyre = {name: t.to("spyre") for name, t in expected.items()}
    loaded = load(save(on_spyre), map_location=TO_SPYRE[form], weights_only=weights_only)
    assert loaded.keys() == expected.keys()
    for name, tensor in loaded.items():
        assert_same(tensor, expected[name], SPYRE)


@pytest.mark.parametrize("form", TO_SPYRE_FROM_CPU)
@pytest.mark.parametrize("weights_only", [False, True])
def test_cpu_checkpoint_loads_onto_spyre(form, weights_only):
    expected = tensors()
    loaded = load(save(expected), map_location=TO_SPYRE_FROM_CPU[form], weights_only=weights_only)
    for name, tensor in loaded.items():
        assert_same(tensor, expected[name], SPYRE)


@pytest.mark.parametrize("form", TO_CPU)
@pytest.mark.parametrize("weights_only", [False, True])
def test_spyre_checkpoint_loads_onto_cpu(form, weights_only):
    expected = tensors()
    data = save({name: t.to("spyre") for name, t in expected.items()})
    loaded = load(data, map_location=TO_CPU[form], weights_only=weights_only)
    for name, tensor in loaded.items():
        assert_same(tensor, expected[name], CPU)
        # A tensor loaded on the host goes back to spyre.
        assert_same(tensor.to("spyre"), expected[name], SPYRE)


def test_views_keep_sharing_their_storage():
    base = torch.arange(12.0, device="spyre")
    data = save({"base": base, "view": base[2:8].view(2, 3), "param": nn.Parameter(base[:4])})
    loaded = load(data, weights_only=True)
    storage = loaded["base"].untyped_storage()
    assert loaded["view"].untyped_storage().data_ptr() == storage.data_ptr()
    assert loaded["view"].storage_offset() == 2
    assert isinstance(loaded["param"], nn.Parameter) and loaded["param"].requires_grad
    loaded["base"][3] = -1.0  # writes through to the view, on the device
    assert loaded["view"].cpu().tolist() == [[2.0, -1.0, 4.0], [5.0, 6.0, 7.0]]


def model(seed):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3), nn.LayerNorm(3))


def train_step(net, optimizer):
    x = torch.arange(24.0, device="spyre").reshape(4, 6) / 24
    loss = net(x).square().sum()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


@pytest.mark.parametrize("optimizer_class", [torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW])
@pytest.mark.parametrize("form", ["none", "str", "dict", "callable"])
def test_module_and_optimizer_state_round_trip(optimizer_class, form):
    kwargs = {"lr": 0.1, "momentum": 0.9} if optimizer_class is torch.optim.SGD else {"lr": 0.01}
    net = model(0).to("spyre")
    optimizer = optimizer_class(net.parameters(), **kwargs)
    train_step(net, optimizer)
    data = save({"model": net.state_dict(), "optimizer": optimizer.state_dict()})

    checkpoint = load(data, map_location=TO_SPYRE[form], weights_only=True)
    restored = model(1).to("spyre")
    restored.load_state_dict(checkpoint["model"])
    restored_optimizer = optimizer_class(restored.parameters(), **kwargs)
    restored_optimizer.load_state_dict(checkpoint["optimizer"])

    for (name, a), (_, b) in zip(net.state_dict().items(), restored.state_dict().items()):
        assert_same(b, a, SPYRE)
    expected_state = optimizer.state_dict()["state"]
    restored_state = restored_optimizer.state_dict()["state"]
    assert restored_state.keys() == expected_state.keys()
    for index, state in expected_state.items():
        assert restored_state[index].keys() == state.keys()
        for key, value in state.items():
            # A host tensor (Adam's "step") moves with map_location, as on CUDA.
            device = value.device if form == "none" else SPYRE
            assert_same(restored_state[index][key], value, device)

    # Both continue identically.
    train_step(net, optimizer)
    train_step(restored, restored_optimizer)
    for a, b in zip(net.parameters(), restored.parameters()):
        assert torch.equal(a.cpu(), b.cpu())


def test_spyre_module_state_dict_loads_into_a_cpu_module():
    net = model(0).to("spyre")
    restored = model(1)
    restored.load_state_dict(load(save(net.state_dict()), map_location="cpu", weights_only=True))
    for a, b in zip(net.state_dict().values(), restored.state_dict().values()):
        assert_same(b, a, CPU)


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated")
def test_pickled_storage_restores_on_spyre():
    storage = torch.arange(10, dtype=torch.int32, device="spyre")._typed_storage()
    restored = pickle.loads(pickle.dumps(storage))
    assert type(restored) is torch.TypedStorage
    assert (restored.device, restored.dtype, restored.size()) == (SPYRE, torch.int32, 10)
    as_tensor = torch.empty(0, dtype=torch.int32, device="spyre").set_(restored._untyped_storage)
    assert as_tensor.cpu().tolist() == list(range(10))


@pytest.mark.parametrize("device", ["cpu", "spyre"])
def test_pickling_an_untyped_storage_fails_as_upstream(device):
    # torch 2.13 cannot unpickle an UntypedStorage on any device (it has no dtype).
    storage = torch.arange(3, device=device).untyped_storage()
    with pytest.raises(AttributeError, match=r"^type object 'torch.storage.UntypedStorage' has no "
                                             r"attribute 'dtype'$"):
        pickle.loads(pickle.dumps(storage))


def test_pickled_tensor_restores_on_spyre():
    tensor = torch.arange(6.0, device="spyre").reshape(2, 3).t()
    restored = pickle.loads(pickle.dumps(tensor))
    assert_same(restored, tensor, SPYRE)


def test_file_round_trip(tmp_path):
    path = tmp_path / "checkpoint.pt"
    net = model(0).to("spyre")
    torch.save(net.state_dict(), path)
    loaded = torch.load(path)
    assert [t.device for t in loaded.values()] == [SPYRE] * len(loaded)
    loaded_mmap = torch.load(path, mmap=True, map_location="spyre", weights_only=True)
    for a, b in zip(net.state_dict().values(), loaded_mmap.values()):
        assert_same(b, a, SPYRE)


def test_loading_onto_a_device_that_does_not_exist():
    data = save(torch.ones(2))
    with pytest.raises(RuntimeError, match=(
            r"^Attempting to deserialize object on SPYRE device 8 but torch.spyre.device_count\(\) "
            r"is 8. Please use torch.load with map_location to map your storages to an existing "
            r"device.$")):
        load(data, map_location="spyre:8")


def test_loading_onto_a_visible_device_this_process_is_not_bound_to():
    data = save(torch.ones(2))
    with pytest.raises(RuntimeError, match=(
            r"^Only one Spyre device per process is supported: this process is bound to spyre:0 "
            r"but spyre:1 was requested \(run one process per device, e.g. with torchrun\)")):
        load(data, map_location="spyre:1")


def test_checkpoint_loads_onto_the_bound_device_of_a_torchrun_rank():
    # A checkpoint saved by rank 0 loads on rank 1 with map_location, as on CUDA.
    proc = run_python(
        """
        import io, torch
        buffer = io.BytesIO()
        torch.save({"w": torch.arange(4.0)}, buffer)
        data = buffer.getvalue()
        torch.spyre.set_device(1)
        a = torch.load(io.BytesIO(data), map_location={"cpu": "spyre:1"})
        b = torch.load(io.BytesIO(data), map_location=f"spyre:{torch.spyre.current_device()}")
        print(a["w"].device, b["w"].device, a["w"].cpu().tolist())
        """,
        env={"AIU_WORLD_SIZE": "2", "LOCAL_RANK": "1"},
    )
    assert proc.stdout.split() == ["spyre:1", "spyre:1", "[0.0,", "1.0,", "2.0,", "3.0]"]
