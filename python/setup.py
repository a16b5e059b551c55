# SPDX-License-Identifier: MIT
"""The C accelerator shmlock._fast (python/ext/), beside pyproject.toml's metadata.

It links liblocal: the header and library come from $SHMLOCK_INCLUDE_DIR and
$SHMLOCK_LIB_DIR when set, else from the source tree around this directory
(include/ and the top-level make's build/) when there, else from the system
(the liblocal-dev package). The Debian package builds it after the top-level
make (debian/rules); `make python-check` builds its own copy (the Makefile's
PY_EXT rule) and does not need this file.

A build that cannot compile it (no liblocal-dev, no Python headers) warns and
installs the package without it: the binding then works through ctypes
alone. $SHMLOCK_ACCEL_REQUIRED=1 makes that an error (debian/rules sets it: a
package must not ship without its accelerator).
"""

import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)


def _dir(env: str, intree: str, marker: str) -> list:
    d = os.environ.get(env)
    if d:
        return [d]
    d = os.path.join(TOP, intree)
    return [d] if os.path.exists(os.path.join(d, marker)) else []


EXT_SOURCES = ["ext/fast.c", "ext/fast_core.c", "ext/fast_hold.c"]

setup(ext_modules=[
    Extension(
        "shmlock._fast",
        sources=EXT_SOURCES,
        depends=["ext/fast.h"],
        include_dirs=_dir("SHMLOCK_INCLUDE_DIR", "include", "liblocal.h"),
        library_dirs=_dir("SHMLOCK_LIB_DIR", "build", "liblocal.so"),
        libraries=["local"],
        extra_compile_args=["-std=gnu11", "-fvisibility=hidden"],
        optional=os.environ.get("SHMLOCK_ACCEL_REQUIRED") != "1",
    )
])
