"""transformers' Trainer as users run it (docs/support.md): transformers' device list lacks
spyre, so its default TrainingArguments keep the batches on cpu; accelerate's
ACCELERATE_TORCH_DEVICE=spyre makes both train on spyre, with CPU's first-step loss."""

import importlib.util

import pytest

from conftest import run_python

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("accelerate") is None,
    reason="transformers and accelerate are not installed")

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
                         report_to=[], save_strategy="no", logging_strategy="no")
result = Trainer(model=model, args=args, train_dataset=Tokens()).train()
print(next(model.parameters()).device, result.training_loss.hex())
"""


@pytest.mark.timeout(300)
def test_accelerate_torch_device_spyre_trains_on_spyre_as_on_cpu():
    # Fresh interpreters: accelerate's state is the process's.
    spyre = run_python(TRAIN, env={"ACCELERATE_TORCH_DEVICE": "spyre"}, timeout=240,
                       fresh=True).stdout.splitlines()[-1].split()  # after the Trainer's summary
    default = run_python(TRAIN, timeout=240, fresh=True).stdout.splitlines()[-1].split()
    assert spyre[0] == "spyre:0" and default[0] == "cpu"
    assert spyre[1] == default[1]  # the first step's loss, bit for bit
