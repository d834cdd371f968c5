"""Random number generators of spyre devices (torch.spyre.manual_seed, ...).

Seeding does not start the runtime: generators live on the host.
"""

from . import _C
from ._device import _device_index, device_count


def _generator(device=None):
    return _C._get_default_generator(_device_index(device))


def manual_seed(seed) -> None:
    """Seed the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed) -> None:
    """Seed the generators of every visible device (torch.manual_seed calls this)."""
    for index in range(device_count()):
        _C._get_default_generator(index).manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a non-deterministic number."""
    _generator().seed()


def seed_all() -> None:
    for index in range(device_count()):
        _C._get_default_generator(index).seed()


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device="spyre"):
    """The generator state of `device` as a uint8 CPU tensor."""
    return _generator(device).get_state()


def set_rng_state(new_state, device="spyre") -> None:
    _generator(device).set_state(new_state)


def get_rng_state_all():
    """The generator states of every visible device, in device order."""
    return [get_rng_state(index) for index in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)
