"""transformers' Trainer as users run it (docs/support.md): transformers' device list lacks
spyre, so its default TrainingArguments keep the batches on cpu; accelerate's
ACCELERATE_TORCH_DEVICE=spyre makes both train on spyre, with CPU's first-step loss. When the
two choose different devices, one of them spyre (accelerate 1.16 picks spyre by itself), the
Trainer stops at its start with an error naming what to set (torch_spyre/_trainer_device.py)."""

import importlib.util
import re
import subprocess
import sys
import types

import pytest
import torch

from conftest import run_python
from torch_spyre._trainer_device import check_devices

needs_transformers = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("accelerate") is None,
    reason="transformers and accelerate are not installed")

# transformers 5.20.2 and accelerate 1.16.0 with the versions of their requirements that the
# project's pins (transformers 4.57.1) do not satisfy; the rest come from the venv (typer, which
# transformers requires for its command line, is not needed to train).
NEWER = ["transformers==5.20.2", "accelerate==1.16.0", "huggingface-hub==2.4.0", "tokenizers==0.23.3",
         "safetensors==0.8.0", "regex==2026.12.2", "httpx2==2.17.0", "httpcore2==2.17.0",
         "anyio==4.16.0", "truststore==0.10.5", "click==8.5.1", "h11==0.16.0"]

ADVICE = ("set ACCELERATE_TORCH_DEVICE=spyre to train on spyre, or TrainingArguments(use_cpu=True) "
          "to train on cpu")

TRAIN = """
import os
import torch
import transformers
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

class Tokens(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        ids = (torch.arange(8) * (i + 1)) % 64
        return {"input_ids": ids, "labels": ids}

transformers.set_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_positions=32,
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
args = TrainingArguments(output_dir=os.getcwd(), max_steps=1, per_device_train_batch_size=4,
                         report_to=[], save_strategy="no", logging_strategy="no",
                         use_cpu=os.environ.get("TEST_USE_CPU") == "1")
result = Trainer(model=model, args=args, train_dataset=Tokens()).train()
print(next(model.parameters()).device, result.training_loss.hex())
"""


def _args(use_cpu, transformers_device, accelerate_device):
    state = types.SimpleNamespace(device=torch.device(accelerate_device))
    return types.SimpleNamespace(use_cpu=use_cpu, distributed_state=state), torch.device(transformers_device)


@pytest.mark.parametrize("devices", [("cpu", "cpu"), ("spyre", "spyre:0"), ("spyre:0", "spyre")])
def test_agreeing_devices_pass(devices):
    check_devices(*_args(False, *devices))


def test_a_disagreement_without_spyre_is_left_to_transformers():
    check_devices(*_args(False, "cpu", "meta"))


def test_no_distributed_state_passes():
    check_devices(types.SimpleNamespace(use_cpu=False), torch.device("cpu"))


def test_accelerate_choosing_spyre_alone_names_what_to_set():
    msg = ("transformers' TrainingArguments chose device cpu for the batches (its device list lacks "
           "spyre) but accelerate chose spyre for the model; " + ADVICE)
    with pytest.raises(RuntimeError, match="^" + re.escape(msg) + "$"):
        check_devices(*_args(False, "cpu", "spyre"))


def test_variable_overriding_use_cpu_names_the_variable(monkeypatch):
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "spyre")
    msg = ("TrainingArguments(use_cpu=True) put the batches on cpu but accelerate puts the model on "
           "spyre: ACCELERATE_TORCH_DEVICE='spyre' overrides use_cpu in accelerate; unset "
           "ACCELERATE_TORCH_DEVICE to train on cpu")
    with pytest.raises(RuntimeError, match="^" + re.escape(msg) + "$"):
        check_devices(*_args(True, "cpu", "spyre"))


def _train(env=None, pythonpath=None):
    """The last line the TRAIN script prints ([device, loss]), or its error's last line."""
    env = dict(env or {})
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    # A fresh interpreter each: accelerate's state is the process's.
    result = run_python(TRAIN, env=env, timeout=240, fresh=True, check=False)
    lines = (result.stdout if result.returncode == 0 else result.stderr).strip().splitlines()
    return lines[-1] if result.returncode else lines[-1].split()


@needs_transformers
@pytest.mark.slow  # two Trainer runs in fresh interpreters (~15 s)
@pytest.mark.timeout(300)
def test_use_cpu_trains_on_cpu_and_the_variable_that_overrides_it_fails_at_start():
    assert _train({"TEST_USE_CPU": "1"})[0] == "cpu"
    assert _train({"TEST_USE_CPU": "1", "ACCELERATE_TORCH_DEVICE": "spyre"}) == (
        "RuntimeError: TrainingArguments(use_cpu=True) put the batches on cpu but accelerate puts "
        "the model on spyre: ACCELERATE_TORCH_DEVICE='spyre' overrides use_cpu in accelerate; unset "
        "ACCELERATE_TORCH_DEVICE to train on cpu")


@pytest.fixture(scope="module")
def newer_site(tmp_path_factory):
    """A --target dir with transformers 5.20.2 and accelerate 1.16.0 (torch never touched)."""
    target = tmp_path_factory.mktemp("newer-site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                           "--disable-pip-version-check", "--target", str(target), *NEWER],
                          capture_output=True, text=True, timeout=480)
    if proc.returncode:
        pytest.skip("pip could not install transformers 5.20.2 and accelerate 1.16.0 (no index?): "
                    + proc.stderr.strip()[-300:])
    return str(target)


@needs_transformers
@pytest.mark.slow  # installs transformers 5.20.2 into a temp dir
@pytest.mark.timeout(900)
def test_newer_transformers_and_accelerate(newer_site):
    # accelerate 1.16 picks spyre through torch.accelerator while transformers stays on cpu.
    assert _train(pythonpath=newer_site) == "RuntimeError: " + (
        "transformers' TrainingArguments chose device cpu for the batches (its device list lacks "
        "spyre) but accelerate chose spyre for the model; " + ADVICE)
    spyre = _train({"ACCELERATE_TORCH_DEVICE": "spyre"}, newer_site)
    cpu = _train({"TEST_USE_CPU": "1"}, newer_site)
    pinned_cpu = _train({"TEST_USE_CPU": "1"})
    overridden = _train({"TEST_USE_CPU": "1", "ACCELERATE_TORCH_DEVICE": "spyre"}, newer_site)
    assert overridden.startswith("RuntimeError: TrainingArguments(use_cpu=True) put the batches on cpu "
                                 "but accelerate puts the model on spyre: ")
    assert spyre[0] == "spyre:0" and cpu[0] == "cpu"
    assert spyre[1] == cpu[1] == pinned_cpu[1]  # the first step's loss, bit for bit


@needs_transformers
@pytest.mark.timeout(300)
def test_accelerate_torch_device_spyre_trains_on_spyre_as_on_cpu():
    spyre = _train({"ACCELERATE_TORCH_DEVICE": "spyre"})
    default = _train()
    assert spyre[0] == "spyre:0" and default[0] == "cpu"
    assert spyre[1] == default[1]  # the first step's loss, bit for bit
