# SPDX-License-Identifier: MIT
"""The ctypes declarations match include/liblocal.h, field by field."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from shmlock import _lib

HEADER = Path(__file__).resolve().parent.parent.parent / "include" / "liblocal.h"
STRUCTS = {
    "local_session_opts": _lib.SessionOpts, "local_acquire_opts": _lib.AcquireOpts,
    "local_key_info": _lib.KeyInfo, "local_holder": _lib.Holder,
    "local_session_info": _lib.SessionInfo, "local_stats": _lib.Stats,
    "local_waiter": _lib.Waiter,
}


@pytest.mark.skipif(not HEADER.exists() or not shutil.which("cc"),
                    reason="needs the source tree's header and a C compiler")
def test_struct_layouts_match_the_header(tmp_path: Path) -> None:
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "liblocal.h"',
             "int main(void) {"]
    want = []
    for cname, py in STRUCTS.items():
        lines.append(f'printf("%zu\\n", sizeof(struct {cname}));')
        want.append(ctypes.sizeof(py))
        for field in py._fields_:
            fname = field[0]
            lines.append(f'printf("%zu\\n", offsetof(struct {cname}, {fname}));')
            want.append(getattr(py, fname).offset)
    lines.append("return 0; }")
    src = tmp_path / "abi.c"
    src.write_text("\n".join(lines))
    exe = tmp_path / "abi"
    subprocess.run(["cc", "-I", str(HEADER.parent), str(src), "-o", str(exe)], check=True)
    got = [int(x) for x in subprocess.run([str(exe)], check=True, capture_output=True,
                                          text=True).stdout.split()]
    assert got == want


@pytest.mark.skipif(not HEADER.exists(), reason="needs the source tree's header")
def test_error_codes_match_the_header() -> None:
    text = HEADER.read_text()
    body = text[text.index("enum local_error {"):]
    body = body[:body.index("};")]
    names = [ln.strip().split()[0].rstrip(",") for ln in body.splitlines()[1:]
             if ln.strip().startswith("LOCAL_E")]
    assert names[0] == "LOCAL_EBASE" and names[-1] == "LOCAL_ELAST"
    codes = names[1:-1]
    for i, name in enumerate(codes):
        assert getattr(_lib, name[len("LOCAL_"):]) == _lib.EBASE + i, name
