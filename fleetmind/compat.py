"""Load artifacts pickled before the library moved under the ``fleetmind`` namespace.

Releases up to 0.1.0 installed the subpackages as top-level ``data``, ``rca``, ``rl``, ``envs``,
``training`` and ``serving``. Pickles written then (stable-baselines3 ``ppo.zip`` files store the
policy class by module path; MLflow pyfunc models store their wrapper class) name those modules.
:func:`legacy_module_names` makes the old names resolve to the ``fleetmind.*`` modules while such a
file is read, and removes them again afterwards, so the bare names never shadow a user's own modules.
Modules that moved inside the library since (:data:`MOVED_MODULES`) resolve to their new place in
the same block, under the old and the ``fleetmind.*`` spelling.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import ModuleType

OLD_TOP_LEVEL: frozenset[str] = frozenset({"data", "rca", "rl", "envs", "training", "serving"})
"""Top-level names the subpackages had before 0.2.0."""

MOVED_MODULES: dict[str, str] = {
    # MLflow pyfunc models of the placement agent pickle PlacementPyfunc by module path
    "fleetmind.training.sched_train": "fleetmind.training.placement_pyfunc",
}
"""Old module path -> the module that now holds what pickles name there."""


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: ModuleType) -> None:
        self._target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._target

    def exec_module(self, module: ModuleType) -> None:  # already executed under its real name
        return None


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Resolve ``rl.policy`` (and the like) to the already-importable ``fleetmind.rl.policy``."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname in MOVED_MODULES:
            real = MOVED_MODULES[fullname]
        elif fullname.split(".", 1)[0] in OLD_TOP_LEVEL:
            real = f"fleetmind.{fullname}"
            real = MOVED_MODULES.get(real, real)
        else:
            return None
        try:
            module = importlib.import_module(real)
        except ImportError:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, _AliasLoader(module), is_package=hasattr(module, "__path__")
        )


@contextmanager
def legacy_module_names() -> Iterator[None]:
    """Within the block, ``import rl.policy`` gives ``fleetmind.rl.policy`` (and so on).

    A module of a bare old name that something else already imported (a user's own ``data``
    package, say) is left alone and wins; the finder is consulted before the path finders only for
    names nobody has imported. Aliases added here are removed from ``sys.modules`` on exit.
    """
    finder = _AliasFinder()

    def aliased(name: str) -> bool:
        return name.split(".", 1)[0] in OLD_TOP_LEVEL or name in MOVED_MODULES

    before = {name for name in sys.modules if aliased(name)}
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if aliased(n)]:
            if name not in before:
                del sys.modules[name]
                parent, _, leaf = name.rpartition(".")
                if name in MOVED_MODULES and parent in sys.modules:  # the import bound it there
                    vars(sys.modules[parent]).pop(leaf, None)
