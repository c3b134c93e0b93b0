"""images/kind/cuda_stubs.py, on libraries gcc builds here: a program linked against the real library still loads
with the stub in its place (same SONAME, same versioned symbols), a call into the stub aborts naming the symbol, and
only libraries at or over the size floor are replaced."""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_stubs() -> ModuleType:
    spec = importlib.util.spec_from_file_location("cuda_stubs", REPO / "images" / "kind" / "cuda_stubs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


cuda_stubs = _load_stubs()

LIBRARY_C = """
int cublasCreate_v2(void **handle) { *handle = 0; return 42; }
int cublasVersionNumber = 13;
"""
# Linked against this version node, as torch's libraries are linked against libcublas.so.13's.
VERSIONS = "libfake.so.13 { global: cublasCreate_v2; cublasVersionNumber; local: *; };\n"
PROGRAM_C = """
#include <stdio.h>
#include <string.h>
extern int cublasCreate_v2(void **);
extern int cublasVersionNumber;
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "call") == 0) { void *h; printf("%d\\n", cublasCreate_v2(&h)); }
    else printf("loaded, version symbol at %p\\n", (void *)&cublasVersionNumber);
    return 0;
}
"""


def _build(folder: Path) -> tuple[Path, Path]:
    """libfake.so.13 (versioned, like the CUDA wheels' libraries) in folder/lib, and a program linked against it."""
    lib = folder / "lib"
    lib.mkdir()
    (folder / "lib.c").write_text(LIBRARY_C)
    (folder / "lib.map").write_text(VERSIONS)
    (folder / "main.c").write_text(PROGRAM_C)
    library = lib / "libfake.so.13"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libfake.so.13", f"-Wl,--version-script,{folder}/lib.map",
                    "-o", str(library), str(folder / "lib.c")], check=True)
    program = folder / "main"
    # -z now: every symbol bound at load, as Python's dlopen (RTLD_NOW) binds torch's libraries.
    subprocess.run(["gcc", "-o", str(program), str(folder / "main.c"), str(library), f"-Wl,-rpath,{lib}", "-Wl,-z,now"],
                   check=True)
    return library, program


def test_a_program_linked_against_the_real_library_loads_with_the_stub_and_a_call_aborts(tmp_path: Path) -> None:
    library, program = _build(tmp_path)
    assert subprocess.run([program, "call"], capture_output=True, text=True, check=True).stdout == "42\n"

    assert cuda_stubs.main(tmp_path / "lib", min_bytes=0) == 0

    loaded = subprocess.run([program], capture_output=True, text=True)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.startswith("loaded")
    called = subprocess.run([program, "call"], capture_output=True, text=True)
    assert called.returncode == -signal.SIGABRT
    assert "libfake.so.13: cublasCreate_v2 was called" in called.stderr
    symbols = cuda_stubs.exported_symbols(cuda_stubs.readelf("--dyn-syms", "-W", str(library)))
    assert {(s.name, s.kind, s.version) for s in symbols} == {
        ("cublasCreate_v2", "FUNC", "libfake.so.13"), ("cublasVersionNumber", "OBJECT", "libfake.so.13")}
    assert next(s.size for s in symbols if s.kind == "OBJECT") == 4  # the real int's size, not a byte
    assert cuda_stubs.soname(cuda_stubs.readelf("-d", str(library))) == "libfake.so.13"


def test_only_libraries_at_or_over_the_size_floor_become_stubs(tmp_path: Path) -> None:
    library, program = _build(tmp_path)
    smaller = tmp_path / "lib" / "libsmall.so.1"
    subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libsmall.so.1", "-o", str(smaller), "-x", "c", "-"],
                   input="int small(void) { return 1; }\n", text=True, check=True)
    assert smaller.stat().st_size < library.stat().st_size
    assert cuda_stubs.main(tmp_path / "lib", min_bytes=library.stat().st_size + 1) == 1  # nothing to stub
    assert subprocess.run([program, "call"], capture_output=True, text=True, check=True).stdout == "42\n"

    small_before = smaller.read_bytes()
    assert cuda_stubs.main(tmp_path / "lib", min_bytes=library.stat().st_size) == 0
    assert smaller.read_bytes() == small_before
    assert subprocess.run([program, "call"], capture_output=True, text=True).returncode == -signal.SIGABRT


def _rows(*rows: str) -> str:
    header = ("Symbol table '.dynsym' contains 9 entries:\n"
              "   Num:    Value          Size Type    Bind   Vis      Ndx Name\n")
    return header + "".join(f"    {i}: 0000000000001000 {row}\n" for i, row in enumerate(rows, 1))


def test_readelf_rows_become_symbols_and_what_a_stub_cannot_carry_is_refused() -> None:
    symbols = cuda_stubs.exported_symbols(_rows(
        "    0 FUNC    GLOBAL DEFAULT  UND malloc@GLIBC_2.2.5 (2)",        # a reference, not a definition
        "    0 OBJECT  GLOBAL DEFAULT  ABS libcublas.so.13",              # the version definition itself
        "   12 FUNC    WEAK   DEFAULT   12 ncclSend",
        "0x10000 OBJECT GLOBAL DEFAULT   20 big_table@@NVSHMEM",          # readelf writes large sizes in hex
        "   40 FUNC    WEAK   DEFAULT   12 _ZNSt6vectorIhSaIhEE17_M_default_appendEm",  # std::, left to libstdc++
        "    1 OBJECT  UNIQUE DEFAULT   20 _ZSt19piecewise_construct",
        "    8 FUNC    LOCAL  DEFAULT   12 helper",
    ))
    assert symbols == [cuda_stubs.Symbol("ncclSend", "FUNC", 12, None),
                       cuda_stubs.Symbol("big_table", "OBJECT", 0x10000, "NVSHMEM")]
    for row, refused in [("    8 IFUNC   GLOBAL DEFAULT   12 cuFast", "IFUNC"),
                         ("    8 TLS     GLOBAL DEFAULT   21 cudaTls", "TLS"),
                         ("    8 FUNC    GLOBAL DEFAULT   12 old@V1", "non-default")]:
        with pytest.raises(ValueError, match=refused):
            cuda_stubs.exported_symbols(_rows(row))
    with pytest.raises(ValueError, match="abort"):
        cuda_stubs.stub_source("libx.so", [cuda_stubs.Symbol("abort", "FUNC", 8, None)])


def test_each_symbol_keeps_its_version_and_a_library_mixing_versions_is_refused() -> None:
    # The loader refuses a library lacking a version its user was linked against (seen with a program linked `-z now`
    # against `f@V1`: an unversioned replacement failed ld.so's check_match assertion, rc 127; one defining only `V2`
    # gave "version `V1' not found", rc 1). A library mixing versioned and unversioned exports has no single version
    # script, so it is refused rather than stubbed wrong.
    versioned = cuda_stubs.Symbol("f", "FUNC", 0, "V1")
    assert cuda_stubs.version_script([versioned]) == "V1 { global: f; local: *; };\n"
    assert cuda_stubs.version_script([cuda_stubs.Symbol("f", "FUNC", 0, None)]) is None
    with pytest.raises(ValueError, match="mixed"):
        cuda_stubs.version_script([versioned, cuda_stubs.Symbol("g", "FUNC", 0, None)])
