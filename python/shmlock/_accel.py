# SPDX-License-Identifier: MIT
"""Which accelerator the binding uses: the C module shmlock._fast, or ctypes alone.

shmlock._fast (python/ext/) takes and releases locks and semaphore slots
for Session.lock() and Session.semaphore() without ctypes' conversions and
the Python wrappers around them; everything else goes through ctypes
either way, and both answer alike (python/tests/test_accel.py).

$SHMLOCK_ACCEL chooses, once, at the first Session:
  unset or empty  shmlock._fast when it imports, else ctypes alone;
  off             ctypes alone;
  a path          that built _fast (make python-check and make bench load
                  their build's this way); it must load.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import threading
from types import ModuleType
from typing import Optional

from . import _lib

_mod: Optional[ModuleType] = None
_chosen = False
_choose_lock = threading.Lock()


def _import(path: str) -> Optional[ModuleType]:
    if not path:
        try:
            from . import _fast  # type: ignore[attr-defined]
        except ImportError:
            return None
        return _fast  # type: ignore[no-any-return]
    loader = importlib.machinery.ExtensionFileLoader("shmlock._fast", path)
    spec = importlib.util.spec_from_file_location("shmlock._fast", path, loader=loader)
    if spec is None:
        raise ImportError(f"SHMLOCK_ACCEL={path}: not a loadable module")
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    sys.modules["shmlock._fast"] = mod
    return mod


def _load() -> Optional[ModuleType]:
    choice = os.environ.get("SHMLOCK_ACCEL", "")
    if choice == "off":
        return None
    # liblocal as ctypes finds it ($SHMLOCK_LIBLOCAL first): _fast needs
    # liblocal.so.0, which the dynamic loader then finds already loaded
    # (by its soname), so both paths use one copy of the library.
    _lib.lib()
    mod = _import(choice)
    if mod is None:
        return None
    from .errors import ShmlockError, error_for
    from .session import Hold

    class FastHold(mod.Hold, Hold):  # type: ignore[name-defined,misc]
        """A Hold whose release, __enter__ and __exit__ are C (python/ext/fast_hold.c)."""

        __slots__ = ()

    mod.configure(error_for, ShmlockError, FastHold)
    return mod


def fast() -> Optional[ModuleType]:
    """shmlock._fast, configured, or None for ctypes alone (chosen once)."""
    global _mod, _chosen
    if not _chosen:
        with _choose_lock:
            if not _chosen:
                _mod = _load()
                _chosen = True
    return _mod


def name() -> str:
    """The accelerator in use: "_fast" or "ctypes"."""
    return "_fast" if fast() is not None else "ctypes"
