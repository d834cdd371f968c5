"""How many intra-op threads spyre's kernels split their work over (docs/tensors.md, "Intra-op
threads"): the main thread's count, whichever thread launches. torch.set_num_threads on another
thread (DataLoader's pin-memory thread sets 1) changes ATen's default for the threads started
after it, autograd's spyre device thread among them; a reduction split over fewer threads adds
in another order, and spyre's gradients stopped equalling CPU's.

Each test runs in a process of its own: thread counts are process state."""

import os

import pytest

from conftest import run_python

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                                reason="a thread count of 1 is the only one on one core")

# A float32 sum whose result depends on the thread count: ATen splits a reduction of 2**20
# elements between the threads and adds the partial sums.
SUMS = """
import threading
import torch

torch.set_num_threads(2)
torch.manual_seed(0)
x = torch.randn(1 << 20)
torch.set_num_threads(1)
one_thread = x.sum().item()
torch.set_num_threads(2)
two_threads = x.sum().item()
assert one_thread != two_threads, "the sum must tell the thread counts apart"
dev = x.to("spyre")
"""

# An identity whose backward sums `dev` from autograd's spyre device thread (into seen["sum"]).
SUM_IN_BACKWARD = """
seen = {}

class SumInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):
        return a.clone()

    @staticmethod
    def backward(ctx, grad):
        seen["sum"] = dev.sum()  # launched from autograd's spyre device thread
        return grad
"""


def test_a_thread_started_after_another_threads_set_num_threads_launches_with_the_mains():
    proc = run_python(SUMS + """
print("main", dev.sum().item() == two_threads)
pin = threading.Thread(target=torch.set_num_threads, args=(1,))  # as the pin-memory thread
pin.start()
pin.join()
seen = {}

def worker():
    seen["threads"] = torch.get_num_threads()  # ATen's default for it is now 1
    seen["sum"] = dev.sum().item()
    torch.nonzero(dev[:8] > 0)  # an op run at the call, on this thread: its count comes back
    seen["after"] = torch.get_num_threads()

t = threading.Thread(target=worker)
t.start()
t.join()
print("worker", seen["threads"], seen["sum"] == two_threads, seen["after"])
torch.set_num_threads(1)  # the main thread's own setting is followed
dev.add(0)  # a launch from the main thread
t = threading.Thread(target=worker)
t.start()
t.join()
print("after main set 1", seen["sum"] == one_thread)
""")
    assert proc.stdout.splitlines() == ["main True", "worker 1 True 1", "after main set 1 True"]


def test_backward_on_spyre_keeps_the_main_threads_count():
    # Autograd's spyre device thread starts at the first backward, with ATen's default then.
    proc = run_python(SUMS + SUM_IN_BACKWARD + """
pin = threading.Thread(target=torch.set_num_threads, args=(1,))
pin.start()
pin.join()

a = torch.ones(3, device="spyre", requires_grad=True)
SumInBackward.apply(a).sum().backward()
print(seen["sum"].item() == two_threads)
""")
    assert proc.stdout.split() == ["True"]


def test_gradients_equal_cpus_after_a_pinning_data_loader_started():
    proc = run_python(SUMS + SUM_IN_BACKWARD + """
import copy
from torch.utils.data import DataLoader, TensorDataset

model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 30 * 30, 10))
data = TensorDataset(torch.randn(64, 3, 32, 32), torch.randint(0, 10, (64,)))
loader = DataLoader(data, batch_size=64, pin_memory=True, num_workers=1)
(images, labels), = list(loader)  # its pin-memory thread ran torch.set_num_threads(1)
print("pinned", images.is_pinned())
device_model = copy.deepcopy(model).to("spyre")

for net, device in ((model, "cpu"), (device_model, "spyre")):
    out = net(images.to(device))
    if device == "spyre":
        out = SumInBackward.apply(out)
    torch.nn.functional.cross_entropy(out, labels.to(device)).backward()
same = [torch.equal(p.grad, q.grad.cpu())
        for p, q in zip(model.parameters(), device_model.parameters())]
print("equal", same, seen["sum"].item() == two_threads)
""", timeout=180)
    assert proc.stdout.splitlines() == ["pinned True", "equal [True, True, True, True] True"]
