"""What a spyre tensor's text must be: CPU's text of the same values with spyre's device suffix
(shared by ops/test_printing.py and card_rules_suite.py)."""

import torch


def with_device(cpu_text):
    """CPU's repr of the same values, with the device suffix torch puts first (print within
    wide_lines(): the longer suffix would wrap where CPU's does not)."""
    if ", dtype=" in cpu_text:
        return cpu_text.replace(", dtype=", ", device='spyre:0', dtype=", 1)
    return cpu_text[:-1] + ", device='spyre:0')"


def wide_lines():
    return torch._tensor_str.printoptions(linewidth=200)
