"""verl on a machine without an accelerator: a `cpu` platform and the `aworld_cpu` rollout.

verl imports this package in every one of its processes when `VERL_USE_EXTERNAL_MODULES`
names it (verl/__init__.py); the verl engine's renderer sets that, with `VERL_PLATFORM=cpu`,
for a run whose `trainer.device` is `cpu`. Importing it registers:

- `PlatformCPU` in verl's PlatformRegistry (chosen only by `VERL_PLATFORM=cpu`);
- the rollout name `aworld_cpu`: a replica whose server samples with our LocalPolicy on CPU,
  and the in-worker adapter that hands it the actor's weights after every update;
- the checkpoint engine `aworld_cpu`, which carries the actor's weights to standalone
  replicas (separate_async) through Ray's object store.
"""

from aworld_train.engines.verl.cpu import platform as _platform  # noqa: F401
from aworld_train.engines.verl.cpu import rollout as _rollout  # noqa: F401
from aworld_train.engines.verl.cpu import weights as _weights  # noqa: F401

PLUGIN_MODULE = __name__
ROLLOUT_NAME = _rollout.NAME
