"""The heap allocator: tcmalloc where the machine has it, preloaded by the ``nmt`` command.

Nearly every training step allocates and frees tensors of sizes it has not seen before (each
batch length is new). glibc's malloc keeps what they free (:func:`nmt.runtime.devices.configure_cpu`)
but in pieces it cannot join, so its heap grows past what is ever in use at once: at the
Transformer's reference size, 1,088 MB of heap for 675 MB in use over 300 steps. tcmalloc
(gperftools; Debian's ``libtcmalloc-minimal4``) carves memory by size class: 300 steps peaked
at 971 MB on it and 1,201 MB on glibc's, at the same speed (docs/performance.md, "The allocator").

An allocator replaces malloc only if it is loaded before anything allocates, that is before
Python starts. So the ``nmt`` command runs itself again, once, with ``LD_PRELOAD`` naming the
library, as PyTorch's CPU launcher (``python -m torch.backends.xeon.run_cpu``) does.
``NMT_ALLOCATOR=system`` keeps the C library's malloc; ``NMT_ALLOCATOR=PATH`` preloads that
library instead (it must be an ELF shared object of this machine's word size); a malloc
already in ``LD_PRELOAD`` is left alone. The new process carries a marker (``NMT_PRELOADED``),
so it, and every process it starts, never runs itself again: whatever the library is named and
whether or not the loader could preload it. Importing nmt from Python changes nothing: a
program chooses its own allocator.
"""
from __future__ import annotations

import ctypes
import functools
import os
import struct
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from nmt.errors import NmtError

ENV = "NMT_ALLOCATOR"
MARKER = "NMT_PRELOADED"  # set in the process that runs again: it must not run itself again
TCMALLOC = "libtcmalloc_minimal.so.4"
LIBRARY_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
                "/usr/local/lib")
# tcmalloc reports every allocation over 1 GB on stderr; a big batch's tensors may be one.
_QUIET = {"TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD": str(1 << 40)}


def find_tcmalloc(dirs: tuple[str, ...] = LIBRARY_DIRS) -> str | None:
    """The path of tcmalloc's shared library, or None where none is installed."""
    return next((str(Path(d) / TCMALLOC) for d in dirs if (Path(d) / TCMALLOC).is_file()), None)


def preload_environment(environ: Mapping[str, str], platform: str = sys.platform,
                        dirs: tuple[str, ...] = LIBRARY_DIRS) -> dict[str, str] | None:
    """The environment to run ``nmt`` again in, with an allocator preloaded; None: run as is
    (not Linux, ``NMT_ALLOCATOR=system``, an allocator preloaded already, none installed)."""
    choice = environ.get(ENV) or "auto"  # set but empty is unset, as a shell's VAR= means
    preloaded = environ.get("LD_PRELOAD", "")
    if platform != "linux" or choice == "system" or MARKER in environ or "malloc" in preloaded:
        return None
    if choice == "auto":
        library = find_tcmalloc(dirs)
        if library is None or shared_object_problem(Path(library)):
            return None
    else:
        problem = shared_object_problem(Path(choice))
        if problem:
            raise NmtError(f"{ENV}={choice}: {problem}; use auto, system or the path of a malloc "
                           "library (e.g. libtcmalloc_minimal.so.4)")
        library = choice
    return {**_QUIET, **environ, MARKER: library, "LD_PRELOAD": " ".join(filter(None, (library, preloaded)))}


def shared_object_problem(path: Path) -> str | None:
    """Why the loader could not preload ``path`` into this Python (not a file, not an ELF
    shared object, another word size), or None when it looks loadable."""
    try:
        with open(path, "rb") as f:
            header = f.read(18)
    except IsADirectoryError:
        return "is a directory, not a library file"
    except OSError as e:
        return "no such library file" if isinstance(e, FileNotFoundError) else f"cannot read ({e.strerror})"
    if len(header) < 18 or header[:4] != b"\x7fELF":
        return "not a shared library (no ELF header)"
    word_size = {1: 4, 2: 8}.get(header[4])
    e_type = int.from_bytes(header[16:18], "little" if header[5] == 1 else "big")
    if e_type != 3:  # ET_DYN
        return "an ELF file, but not a shared library"
    if word_size != struct.calcsize("P"):
        return f"a {8 * (word_size or 0)}-bit library, but this Python is {8 * struct.calcsize('P')}-bit"
    return None


def run_with_preloaded_allocator() -> None:
    """Replace this process by the same command with :func:`preload_environment`'s allocator,
    if it names one. Call it first thing: nothing has read stdin or started a thread yet."""
    environ = preload_environment(os.environ)
    if environ is not None:
        if sys.stdout is not None:  # None where the command was started with stdout closed
            sys.stdout.flush()
        os.execve(sys.executable, sys.orig_argv, environ)


@functools.cache
def in_use() -> str:
    """The malloc this process runs on: ``tcmalloc``, ``jemalloc``, ``mimalloc`` or ``system``."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return "system"
    return next((name for name in ("tcmalloc", "jemalloc", "mimalloc") if f"lib{name}" in maps), "system")


def release_freed_memory() -> None:
    """Hand the heap's free memory back to the OS (tcmalloc's ``ReleaseFreeMemory`` or glibc's
    ``malloc_trim``; elsewhere nothing). What preparing the data freed (SentencePiece's training,
    the text of the corpus; 264 MB on fra-eng) would otherwise stay resident for the whole run
    under :func:`nmt.runtime.devices.configure_cpu`'s thresholds, and what a run's steps free
    grows the heap (docs/performance.md, "A whole run under 1 GB"). Objects in reference cycles
    are not yet freed: a caller that made many collects them first."""
    process = ctypes.CDLL(None)
    for symbol, args in (("MallocExtension_ReleaseFreeMemory", ()), ("malloc_trim", (0,))):
        function = getattr(process, symbol, None)
        if function is not None:
            function(*args)
            return


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]


@functools.cache
def _mallinfo2() -> Callable[[], _MallInfo2]:
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = _MallInfo2
    return libc.mallinfo2


def heap_in_use() -> int:
    """Bytes the heap has handed out and not taken back: tcmalloc's count where it is preloaded,
    else glibc's arenas and mmapped blocks (``mallinfo2``; Linux with glibc only). A
    :class:`nmt.tools.bench.PeakRSS` ``read`` that leaves out what the heap keeps free."""
    tcmalloc = getattr(ctypes.CDLL(None), "MallocExtension_GetNumericProperty", None)
    if tcmalloc is not None:
        value = ctypes.c_size_t()
        tcmalloc(b"generic.current_allocated_bytes", ctypes.byref(value))
        return value.value
    info = _mallinfo2()()
    return info.uordblks + info.hblkhd
