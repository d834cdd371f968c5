"""Device index arguments, as torch.cuda takes them: -1 is the current device, -2 and below are
refused naming the index; an index that names no visible device has one message wherever it is
passed (also past int8, and in a device string, checked before it narrows)."""

import pytest
import torch

import torch_spyre
from conftest import run_python

C = torch_spyre._C


def out_of_range(index, count=8):
    return (rf"^Invalid device index {index}: out of range for {count} visible Spyre device\(s\) "
            rf"\(expected an index in \[0, {count}\)\)$")


def test_minus_one_is_the_current_device_as_on_cuda():
    current = torch.spyre.current_stream()
    assert torch.spyre.current_stream(-1) == current
    assert torch.spyre.default_stream(-1) == torch.spyre.default_stream()
    torch.spyre.synchronize(-1)
    x = torch.ones(256, device="spyre")
    assert torch.spyre.memory_allocated(-1) == torch.spyre.memory_allocated()
    assert torch.spyre.memory_allocated(-1) >= 1024
    assert torch.spyre.max_memory_allocated(-1) == torch.spyre.max_memory_allocated()
    s = torch.spyre.Stream(device=-1)
    assert (s.device_index, s.device.type) == (0, "spyre")
    assert torch.spyre.host_compute_stream(-1).stream_id >= C._first_host_compute_stream_id
    assert C._current_stream(-1) == C._current_stream(0)
    del x


def below_minus_one(index, count=8):
    return rf"^Invalid device index {index}: expected -1 \(the current device\) or an index in \[0, {count}\)$"


# torch.cuda treats only -1 as the current device; -2 and below name no device and raise.
@pytest.mark.parametrize("call, index", [
    (lambda: torch.spyre.current_stream(-2), -2),
    (lambda: torch.spyre.default_stream(-3), -3),
    (lambda: torch.spyre.host_compute_stream(-2), -2),
    (lambda: torch.spyre.Stream(device=-2), -2),
    (lambda: torch.spyre.synchronize(-2), -2),
    (lambda: torch.spyre.memory_allocated(-5), -5),
    (lambda: torch.spyre.max_memory_allocated(-2), -2),
    (lambda: torch.spyre.memory_reserved(-2), -2),
    (lambda: torch.spyre.memory_stats(-2), -2),
    (lambda: torch.spyre.reset_peak_memory_stats(-2), -2),
    (lambda: torch.spyre.mem_get_info(-2), -2),
    (lambda: torch.spyre.memory_summary(-2), -2),
    (lambda: torch.spyre.get_device_properties(-2), -2),
    (lambda: torch.spyre.get_device_capability(-2), -2),
    (lambda: torch.spyre.get_rng_state(-2), -2),
    (lambda: torch.spyre.synchronize(-(2**70)), -(2**70)),
    (lambda: torch.Stream(0, -2, C._device_type), -2),
    (lambda: C._current_stream(-3), -3),
    (lambda: C._check_device_index(-128), -128),
], ids=["current_stream", "default_stream", "host_compute_stream", "Stream", "synchronize",
        "memory_allocated", "max_memory_allocated", "memory_reserved", "memory_stats",
        "reset_peak_memory_stats", "mem_get_info", "memory_summary", "get_device_properties",
        "get_device_capability", "get_rng_state", "synchronize-huge", "torch.Stream",
        "_C._current_stream", "_C._check_device_index"])
def test_an_index_below_minus_one_is_refused_naming_it(call, index):
    with pytest.raises(ValueError, match=below_minus_one(index)):
        call()


def test_a_device_context_of_any_negative_index_changes_nothing_as_on_cuda():
    # torch.cuda.device(-2) is a no-op too (torch.cuda._exchange_device ignores negatives)
    before = torch.spyre.current_device()
    with torch.spyre.device(-2):
        assert torch.spyre.current_device() == before
    assert torch.spyre.current_device() == before


def test_set_device_still_refuses_a_negative_index():
    # upstream torch-spyre's test_spyre_device_count_and_set_device: set_device(-1) raises
    with pytest.raises(ValueError, match=r"^Invalid device index -1: set_device needs an index "
                                         r"in \[0, 8\)$"):
        torch.spyre.set_device(-1)


@pytest.mark.parametrize("call", [
    lambda: torch.spyre.set_device(8),
    lambda: torch.spyre.current_stream(8),
    lambda: torch.spyre.Stream(device="spyre:8"),
    lambda: torch.empty(2, device="spyre:8"),
    lambda: torch.spyre.get_rng_state(8),
    lambda: torch.Generator(device="spyre:8"),
    lambda: C._current_stream(8),
    lambda: C.host_compute_stream("spyre:8"),
], ids=["set_device", "current_stream", "Stream", "empty", "get_rng_state", "Generator",
        "_C._current_stream", "_C.host_compute_stream"])
def test_an_index_past_the_visible_devices_has_one_message(call):
    with pytest.raises(RuntimeError, match=out_of_range(8)):
        call()


@pytest.mark.parametrize("index", [127, 128, 300, 2**40])
def test_an_index_past_int8_has_the_same_message(index):
    for call in (lambda: torch.spyre.current_stream(index), lambda: torch.spyre.Stream(device=index),
                 lambda: C._current_stream(index), lambda: C.set_device(index),
                 lambda: torch.Stream(0, index, C._device_type)):
        with pytest.raises(RuntimeError, match=out_of_range(index)):
            call()


def test_a_start_past_the_visible_devices_reports_the_same_message():
    proc = run_python("""
        import torch
        try:
            torch.spyre.init()
        except RuntimeError as e:
            print(e)
    """, env={"LOCAL_RANK": "8"})
    assert proc.stdout.splitlines() == [
        "Invalid device index 8: out of range for 8 visible Spyre device(s) "
        "(expected an index in [0, 8))"
    ]


@pytest.mark.parametrize("text,index", [
    ("spyre:256", "256"), ("spyre:300", "300"), ("spyre:127", "127"), ("spyre:100", "100"),
])
def test_device_strings_are_checked_before_they_narrow(text, index):
    for call in (lambda: C.host_compute_stream(text), lambda: C.host_compute_stream_by_id(65, text),
                 lambda: torch.spyre.host_compute_stream(text), lambda: torch.spyre.synchronize(text),
                 lambda: torch.spyre.Stream(device=text), lambda: torch.spyre.current_stream(text)):
        with pytest.raises(RuntimeError, match=out_of_range(index)):
            call()


def test_a_device_string_in_range_still_names_its_device():
    assert C.host_compute_stream("spyre:0").device() == torch.device("spyre:0")
    assert C.host_compute_stream("spyre").device() == torch.device("spyre:0")
    with pytest.raises(RuntimeError, match="this process is bound to spyre:0 but spyre:4"):
        C.host_compute_stream("spyre:4")
