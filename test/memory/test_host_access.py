"""Device memory the host cannot touch (docs/tensors.md, "Running like a card"):
a host read or write through a spyre tensor's address stops the process with a
report naming the address, its allocation, the fix and the Python stack; a
crash elsewhere keeps Python's own report."""

import re
import signal

import pytest

from conftest import run_python

# The tensor's address and the allocation (the allocator's segment) holding it,
# printed before the access; `{access}` then runs inside `{function}`.
ACCESS = """
import ctypes, torch
x = torch.zeros(4, dtype=torch.float32, device="spyre")
torch.spyre.synchronize()
address = x.data_ptr() + 4
(segment,) = [s for s in torch.spyre.memory._snapshot()["segments"]
              if s["address"] <= address < s["address"] + s["total_size"]]
print(address, segment["address"], segment["total_size"], flush=True)
{extra}
def {function}():
    {access}
{function}()
print("the host touched device memory and went on", flush=True)
"""

FIX = ("Fix: copy the data to the host first (tensor.cpu(), tensor.to('cpu'), or copy_ into a "
       "CPU tensor) and read or write that copy; hand device tensors to device code only.")


def run_access(function, access, extra="", env=None):
    """(stdout, stderr) of a fresh process that touched device memory from the
    host, checked to have died of SIGSEGV before going on."""
    result = run_python(ACCESS.format(function=function, access=access, extra=extra), env=env,
                        check=False, fresh=True, timeout=180)
    assert result.returncode == -signal.SIGSEGV, (result.returncode, result.stdout, result.stderr)
    assert "went on" not in result.stdout
    return result.stdout, result.stderr


def check_report(stdout, stderr, function):
    address, start, size = (int(field) for field in stdout.split())
    lines = stderr.splitlines()
    at = lines.index(f"Fatal error: the host accessed spyre device memory at address {address:#x}")
    assert lines[at + 1] == ("This address is spyre device memory: host code cannot read or write "
                             "it (on a Spyre card it is not mapped either).")
    assert lines[at + 2] == (f"It falls in the device allocation starting at {start:#x} of {size} "
                             f"bytes (offset {address - start}).")
    assert lines[at + 3] == FIX
    assert lines[at + 4] == "Python Stack (most recent call first):"
    frames = lines[at + 5:]
    assert re.fullmatch(rf'  File "<string>", line \d+ in {function}', frames[0]), frames
    assert re.fullmatch(r'  File "<string>", line \d+ in <module>', frames[1]), frames


def test_host_read_through_data_ptr_stops_with_report():
    stdout, stderr = run_access("read_device_memory",
                                "return ctypes.c_float.from_address(address).value")
    check_report(stdout, stderr, "read_device_memory")


def test_host_write_through_data_ptr_stops_with_report():
    stdout, stderr = run_access("write_device_memory",
                                "ctypes.c_float.from_address(address).value = 1.0")
    check_report(stdout, stderr, "write_device_memory")


def test_a_crash_outside_device_memory_keeps_pythons_report():
    # Device memory exists (the handler is installed); the fault is elsewhere.
    result = run_python("""
        import ctypes, torch
        x = torch.ones(4, device="spyre")
        torch.spyre.synchronize()
        def crash_elsewhere():
            ctypes.string_at(0)
        crash_elsewhere()
    """, env={"PYTHONFAULTHANDLER": "1"}, check=False, fresh=True, timeout=180)
    assert result.returncode == -signal.SIGSEGV, (result.returncode, result.stderr)
    assert "Fatal Python error: Segmentation fault" in result.stderr
    assert re.search(r'  File "<string>", line \d+ in crash_elsewhere', result.stderr)
    assert "spyre device memory" not in result.stderr


# A C++ extension (a user's binding that takes a tensor's pointer) reads the
# device address; built once, in a directory of the test's own.
EXTENSION = """
from torch.utils.cpp_extension import load_inline
peek = load_inline(
    name="spyre_host_peek", cpp_sources=[
        "#include <torch/extension.h>\\n"
        "double peek(const at::Tensor& t, int64_t i) {{ return t.data_ptr<float>()[i]; }}\\n"
        "void poke(const at::Tensor& t, int64_t i) {{ t.data_ptr<float>()[i] = 1.0f; }}\\n"],
    functions=["peek", "poke"], build_directory={build!r}, verbose=False)
"""


@pytest.mark.slow
@pytest.mark.parametrize("function,call", [("extension_reads", "peek.peek(x, 1)"),
                                           ("extension_writes", "peek.poke(x, 1)")])
def test_a_cpp_extension_touching_device_memory_stops_with_report(tmp_path_factory, function, call):
    build = tmp_path_factory.getbasetemp() / "spyre_host_peek"
    build.mkdir(exist_ok=True)
    stdout, stderr = run_access(function, call, extra=EXTENSION.format(build=str(build)))
    check_report(stdout, stderr, function)


def test_the_report_never_waits_for_a_busy_allocation_registry():
    # A fault handler must not wait for a lock (its holder may be the interrupted thread, or
    # stopped): with the registry of device allocations held, the report says so at once.
    stdout, stderr = run_access(
        "read_while_the_registry_is_held", "return ctypes.c_float.from_address(address).value",
        extra="import torch_spyre._testing as testing\ntesting.lock_device_memory_registry()")
    address = int(stdout.split()[0])
    lines = stderr.splitlines()
    at = lines.index(f"Fatal error: the host accessed spyre device memory at address {address:#x}")
    assert lines[at + 2] == ("Its allocation is unknown: the registry of device allocations was "
                             "busy (a fault report does not wait for it).")
    assert lines[at + 3] == FIX
    assert re.fullmatch(r'  File "<string>", line \d+ in read_while_the_registry_is_held',
                        lines[at + 5]), lines


def test_device_memory_the_host_cannot_back_is_reported_on_the_engine():
    # The shared memory behind device memory runs out (a container's limit): an executor's
    # write faults with SIGBUS on its own view of the memory, and the report says what it is.
    result = run_python("""
        import torch, torch_spyre._testing as testing
        x = torch.zeros(1024, dtype=torch.float32, device="spyre")
        torch.spyre.synchronize()
        (segment,) = [s for s in torch.spyre.memory._snapshot()["segments"]
                      if s["address"] <= x.data_ptr() < s["address"] + s["total_size"]]
        print(x.data_ptr(), segment["address"], segment["total_size"], flush=True)
        testing.exhaust_device_memory_backing()
        x.fill_(1.0)
        torch.spyre.synchronize()
        print("the engine wrote memory nothing backs and went on", flush=True)
    """, check=False, fresh=True, timeout=180)
    assert result.returncode == -signal.SIGBUS, (result.returncode, result.stdout, result.stderr)
    assert "went on" not in result.stdout
    data, start, size = (int(field) for field in result.stdout.split())
    lines = result.stderr.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("Fatal error: spyre device memory")]
    found = re.fullmatch(r"Fatal error: spyre device memory at address (0x[0-9a-f]+) could not be "
                         r"backed \(SIGBUS at the runtime's executor address 0x[0-9a-f]+\)",
                         lines[at])
    assert found, lines[at]
    address = int(found.group(1), 16)
    assert data <= address < data + 4096, (hex(data), hex(address))
    assert lines[at + 1] == ("The emulated device memory lives in shared memory (a memfd); the host "
                             "could not supply a page for it: the machine or container is out of "
                             "memory (or of shared memory).")
    assert lines[at + 2] == (f"It falls in the device allocation starting at {start:#x} of {size} "
                             f"bytes (offset {address - start}).")
    assert lines[at + 3] == ("Fix: free host memory or raise the container's memory limit, or give "
                             "the emulated device less memory (FLEX_STUB_MEMORY_BYTES) and use less "
                             "of it.")
