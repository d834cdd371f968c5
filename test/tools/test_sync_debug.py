"""Issue 33, item 6: sync debug mode, as torch.cuda's. torch.spyre.set_sync_debug_mode
("default" | "warn" | "error", or 0/1/2) makes the host's implicit waits for the device
warn or raise (csrc/runtime/sync_debug.h); explicit waits are never flagged."""

import warnings

import pytest
import torch

import torch_spyre  # noqa: F401
from conftest import run_python
from torch_spyre.testing import Gate

MESSAGE = "called a synchronizing spyre operation: "
D2H = MESSAGE + "a blocking copy from spyre to cpu"
H2D = MESSAGE + "a blocking copy from cpu to spyre"
ITEM = MESSAGE + r"aten::_local_scalar_dense \(\.item\(\)\)"


@pytest.fixture(autouse=True)
def default_mode():
    """The mode is per process: every test starts and ends in the default mode."""
    torch.spyre.set_sync_debug_mode("default")
    yield
    torch.spyre.set_sync_debug_mode("default")


def sync_warnings(record):
    return [str(w.message) for w in record if MESSAGE in str(w.message)]


def spyre(values, **kwargs):
    return torch.tensor(values, **kwargs).to("spyre")


# Each implicit wait: (name, setup() -> args, call(*args) -> host value, expected, message).
IMPLICIT = [
    ("item", lambda: (spyre([1.5, 2.0]),), lambda x: x.sum().item(), 3.5, ITEM),
    ("int", lambda: (spyre([3, 4]),), lambda x: int(x.sum()), 7, ITEM),
    ("bool", lambda: (spyre([0.0, 1.0]),), lambda x: bool(x.any()), True, ITEM),
    ("cpu", lambda: (spyre([1.0, 2.0]),), lambda x: (x * 2).cpu().tolist(), [2.0, 4.0], D2H),
    ("to_cpu", lambda: (spyre([1, 2]),), lambda x: (x + 1).to("cpu").tolist(), [2, 3], D2H),
    ("tolist", lambda: (spyre([3, 4]),), lambda x: (x - 1).tolist(), [2, 3], D2H),
    ("h2d_pageable", lambda: (torch.tensor([5.0, 6.0]),),
     lambda x: pinned_copy(x.to("spyre")), [5.0, 6.0], H2D),
    ("nonzero", lambda: (spyre([0, 3, 0, 5]),),
     lambda x: pinned_copy(torch.nonzero(x)), [[1], [3]],
     MESSAGE + r"aten::nonzero(?![\w.])"),
    ("masked_select", lambda: (spyre([1.0, 2.0, 3.0]), spyre([True, False, True])),
     lambda x, m: pinned_copy(torch.masked_select(x, m)), [1.0, 3.0],
     MESSAGE + r"aten::masked_select(?![\w.])"),
    ("boolean_index", lambda: (spyre([1.0, 2.0, 3.0]), spyre([False, True, True])),
     lambda x, m: pinned_copy(x[m]), [2.0, 3.0],
     MESSAGE + r"aten::index(?![\w.])"),
    ("unique", lambda: (spyre([3, 1, 3, 2]),),
     lambda x: pinned_copy(torch.unique(x)), [1, 2, 3],
     MESSAGE + r"aten::_unique2(?![\w.])"),
]
IDS = [case[0] for case in IMPLICIT]


def pinned_copy(t):
    """t's values through an explicit wait only (silent in every mode)."""
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    torch.spyre.synchronize()
    return host.tolist()


@pytest.mark.parametrize("name, setup, call, expected, message", IMPLICIT, ids=IDS)
def test_warn_mode_warns_once_per_implicit_wait(name, setup, call, expected, message):
    args = setup()
    torch.spyre.synchronize()
    torch.spyre.set_sync_debug_mode("warn")
    with pytest.warns(UserWarning, match=message) as record:
        value = call(*args)
    assert value == expected
    assert len(sync_warnings(record)) == 1, sync_warnings(record)


@pytest.mark.parametrize("name, setup, call, expected, message", IMPLICIT, ids=IDS)
def test_error_mode_raises_and_leaves_the_device_usable(name, setup, call, expected, message):
    args = setup()
    torch.spyre.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match=message):
        call(*args)
    # The stream still works: no error latched, a following op, its value read
    # by explicit waits.
    stream = torch.spyre.current_stream()
    assert torch.spyre.stream_get_error(stream) == torch.spyre.SpyreStreamError.Success
    y = torch.full((2,), 4.0, device="spyre") * 2
    torch.spyre.synchronize()
    assert pinned_copy(y) == [8.0, 8.0]
    torch.spyre.set_sync_debug_mode("default")
    assert call(*args) == expected


def test_error_raises_before_waiting_and_loses_no_queued_work():
    # The gate holds the stream: .item() and .cpu() in error mode raise at once
    # (they would block otherwise), and the work queued behind the gate still runs.
    x = spyre([1.0, 2.0, 3.0])
    torch.spyre.synchronize()
    with Gate() as gate:
        gate.block()
        y = x * 10
        torch.spyre.set_sync_debug_mode("error")
        with pytest.raises(RuntimeError, match=ITEM):
            y.sum().item()
        with pytest.raises(RuntimeError, match=D2H):
            y.cpu()
        with pytest.raises(RuntimeError, match=MESSAGE + r"aten::nonzero(?![\w.])"):
            torch.nonzero(y)
        z = y + 1
        gate.release()
    torch.spyre.synchronize()
    assert pinned_copy(y) == [10.0, 20.0, 30.0]
    assert pinned_copy(z) == [11.0, 21.0, 31.0]


def test_print_warns_and_prints_the_values(capsys):
    x = spyre([1.0, 2.5])
    torch.spyre.synchronize()
    torch.spyre.set_sync_debug_mode("warn")
    with pytest.warns(UserWarning, match=MESSAGE) as record:
        print(x)
    assert capsys.readouterr().out == "tensor([1.0000, 2.5000], device='spyre:0')\n"
    # printing reads the values on the host: at least one implicit wait
    assert len(sync_warnings(record)) >= 1
    torch.spyre.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match=MESSAGE):
        print(x)


def explicit_device_sync():
    torch.spyre.synchronize()


def explicit_accelerator_sync():
    torch.accelerator.synchronize()


def explicit_stream_sync():
    torch.spyre.current_stream().synchronize()


def explicit_side_stream_sync():
    s = torch.spyre.Stream()
    with torch.spyre.stream(s):
        torch.full((3,), 1.0, device="spyre").add_(1)
    s.synchronize()


def explicit_event_sync():
    e = torch.spyre.Event()
    e.record()
    e.synchronize()


def explicit_torch_event_sync():
    e = torch.Event("spyre")
    e.record()
    e.synchronize()


def non_blocking_copies():
    host = torch.arange(4.0).pin_memory()
    d = host.to("spyre", non_blocking=True)
    back = torch.empty(4, pin_memory=True)
    back.copy_(d * 2, non_blocking=True)
    torch.spyre.synchronize()
    assert back.tolist() == [0.0, 2.0, 4.0, 6.0]


def non_blocking_pageable_copy():
    d = torch.arange(3.0).to("spyre", non_blocking=True)
    assert pinned_copy(d) == [0.0, 1.0, 2.0]


EXPLICIT = [explicit_device_sync, explicit_accelerator_sync, explicit_stream_sync,
            explicit_side_stream_sync, explicit_event_sync, explicit_torch_event_sync,
            non_blocking_copies, non_blocking_pageable_copy]


@pytest.mark.parametrize("mode", ["warn", "error"])
@pytest.mark.parametrize("explicit", EXPLICIT, ids=lambda f: f.__name__)
def test_explicit_waits_are_not_flagged(explicit, mode):
    torch.full((4,), 2.0, device="spyre").mul_(3)  # something queued to wait for
    torch.spyre.set_sync_debug_mode(mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        explicit()


def test_queued_ops_and_device_copies_are_not_flagged():
    x = torch.full((4,), 2.0, device="spyre")
    torch.spyre.set_sync_debug_mode("error")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = (x * 3).clone()
        z = torch.empty_like(y).copy_(y)
        torch.spyre.synchronize()
    assert pinned_copy(z) == [6.0, 6.0, 6.0, 6.0]


@pytest.mark.parametrize("name, setup, call, expected, message", IMPLICIT, ids=IDS)
def test_default_mode_is_silent(name, setup, call, expected, message):
    args = setup()
    assert torch.spyre.get_sync_debug_mode() == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert call(*args) == expected


@pytest.mark.parametrize("mode, value", [("default", 0), ("warn", 1), ("error", 2),
                                         (0, 0), (1, 1), (2, 2)])
def test_get_returns_the_int_as_torch_cuda(mode, value):
    torch.spyre.set_sync_debug_mode(mode)
    got = torch.spyre.get_sync_debug_mode()
    assert got == value and type(got) is int


ACCEPTED = r'expected one of "default", "warn", "error" or 0, 1, 2'


@pytest.mark.parametrize("bad, error, named", [
    ("loud", ValueError, "'loud'"), ("WARN", ValueError, "'WARN'"), (3, ValueError, "3"),
    (-1, ValueError, "-1"), (None, TypeError, "None of type NoneType"),
    (True, TypeError, "True of type bool"), (1.0, TypeError, "1.0 of type float"),
])
def test_bad_values_raise_naming_the_value_and_the_accepted_ones(bad, error, named):
    torch.spyre.set_sync_debug_mode("warn")
    with pytest.raises(error, match=f"^invalid sync debug mode {named}, {ACCEPTED}$"):
        torch.spyre.set_sync_debug_mode(bad)
    assert torch.spyre.get_sync_debug_mode() == 1  # unchanged


def test_the_binding_checks_the_range_too():
    with pytest.raises(ValueError, match=r'invalid sync debug mode 7, expected one of 0 '
                                         r'\("default"\), 1 \("warn"\), 2 \("error"\)'):
        torch_spyre._C._set_sync_debug_mode(7)
    assert torch.spyre.get_sync_debug_mode() == 0


def test_the_mode_is_per_process_and_does_not_start_the_runtime():
    proc = run_python(
        """
        import threading, warnings, torch
        torch.spyre.set_sync_debug_mode("error")
        print(torch.spyre.is_initialized(), torch.spyre.get_sync_debug_mode())
        seen = []
        t = threading.Thread(target=lambda: seen.append(torch.spyre.get_sync_debug_mode()))
        t.start(); t.join(30)
        x = torch.ones(2, device="spyre")
        def other_thread():
            try:
                x.sum().item()
            except RuntimeError as e:
                seen.append(str(e).splitlines()[0])
        t = threading.Thread(target=other_thread)
        t.start(); t.join(30)
        print(seen)
        """,
        fresh=True,
    )
    assert proc.stdout.splitlines() == [
        "False 2",
        "[2, 'called a synchronizing spyre operation: aten::_local_scalar_dense (.item())']",
    ]
