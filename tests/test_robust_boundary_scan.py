"""Every byte in and out goes through the boundary: an AST scan of the package and the app.

Readers: ``torch.load``, ``np.load``, ``json.load(s)``, ``yaml`` loads, ``open()`` and
``Path.open()`` for reading, ``read_text``/``read_bytes`` appear only in
``solvers/filecheck.py`` and ``solvers/safejson.py`` (the checks on sizes, kinds, pickles
and budgets), or in a function listed below with the reason it may read directly (the
package's own files, a file already checked by the boundary, a scratch file it wrote).

Writers: ``write_text``/``write_bytes``, ``open()``/``Path.open()`` for writing,
``np.save*``, ``torch.save``, ``to_csv``/``to_parquet`` to a path, ``savefig`` and
``json.dump`` appear only in ``solvers/safewrite.py`` or inside a ``write_atomic``
callback (a function or lambda whose parameter is ``tmp``: it writes the temporary file
that is renamed over the target), or in a function listed below.

A new reader or writer that skips the boundary fails here, naming its file and function.
"""
from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("solvers", "app")
BOUNDARY = {"solvers/filecheck.py", "solvers/safejson.py", "solvers/safewrite.py"}

# "file::function": why it may read without the reader family of solvers/filecheck.py.
READERS_ALLOWED = {
    "app/worker.py::_child": "pickle.loads of the app's own request over its own pipe (no file)",
    "app/worker.py::run_stoppable": "pickle.loads of its own child's answer over its own pipe (no file)",
    "solvers/bench/analysis.py::_vec": "json.loads of one cell of the harness's own results table",
    "solvers/bench/dynamics_tasks.py::dynamics_options": "a JSON round trip of in-memory settings (no file)",
    "solvers/bench/run.py::_machine": "/proc/cpuinfo",
    "solvers/bench/run.py::run_parsed": "the harness's own meta file in its output directory",
    "solvers/bench/store.py::_capped_bytes": "the harness's results table, size-capped",
    "solvers/bench/store.py::_read_csv_text": "the harness's results table, size-capped",
    "solvers/bench/store.py::read_results_bytes": "the harness's results table, size-capped",
    "solvers/cli/workloads.py::_plan_input": "4 KB sniffed from a path (format detection; the reader checks it)",
    "solvers/exact/milp.py::run_pulp": "the solver's own log in its scratch directory",
    "solvers/planfile.py::file_sha256": "hashes, in 1 MB chunks, a file filecheck.input_file let through",
    "solvers/workloads/specs.py::_parse_catalog": "the package's own datasets/catalog.json (torch-free: read before "
                                                  "the CLI loads torch)",
    "solvers/plugins/__init__.py::_allowed": "json.loads of an environment variable the parent process set (no file)",
    "solvers/plugins/forms.py::load": "the parent's own pickled callable over its pipe; a named planner file is the "
                                      "user's own code, executed as such (docs/own-algorithm.md)",
    "solvers/workloads/importers.py::read_trtllm": "TensorRT-LLM's meta_info.json: size-capped, then filecheck.parse_meta",
    "solvers/workloads/importers.py::read_slot_map": "a JSON slot map: size-capped, then safejson at depth 4",
    "solvers/workloads/safetensors_file.py::read_header": "its own guarded reader: header size and JSON depth first",
    "solvers/workloads/safetensors_file.py::read_tensors": "each tensor's byte range checked against the file and the "
                                                           "memory caps before it is read",
    "solvers/workloads/exporters.py::_plan_csv": "numpy parses the text of the capped UTF-8 reader",
    "solvers/workloads/exporters.py::_read_capped_text": "the plan readers' capped text reader (size first)",
    "solvers/workloads/exporters.py::detect_plan_format": "4 KB sniffed (format detection)",
    "solvers/workloads/importers.py::_npz_arrays": "np.load after filecheck.check_npz",
    "solvers/workloads/importers.py::_parse_chunk": "numpy parses one chunk of text already read",
    "solvers/workloads/importers.py::_peek": "64 KB sniffed (format detection)",
    "solvers/workloads/importers.py::iter_vllm_steps": "streamed (ijson) after safejson.check_depth",
    "solvers/workloads/importers.py::read_csv": "streamed in blocks of fixed size (peak: one block)",
}

# "file::function": why it may write without safewrite.write_atomic.
WRITERS_ALLOWED = {
    "solvers/io.py::read_loads": "an upload's bytes into its own fresh TemporaryDirectory",
    "solvers/bench/store.py::ResultStore.append": "one fsync'ed row appended to the harness's own results CSV",
    "solvers/exact/milp.py::_quiet_stdout": "os.devnull",
    "solvers/workloads/exporters.py::_csv_text": "np.savetxt into an in-memory buffer",
    "app/views/explore.py::_current_placement": "an upload's bytes into its own fresh TemporaryDirectory",
    "app/traffic.py::_routing_file": "an upload's bytes into its own fresh TemporaryDirectory",
}

_READ_ATTRS = {"read_text", "read_bytes", "loadtxt", "fromfile", "genfromtxt", "read_csv", "read_parquet",
               "safe_load", "load_all", "full_load"}
_READ_QUALIFIED = {("torch", "load"), ("np", "load"), ("numpy", "load"), ("json", "load"), ("json", "loads"),
                   ("yaml", "load"), ("pickle", "load"), ("pickle", "loads")}
_WRITE_ATTRS = {"write_text", "write_bytes", "to_parquet", "savefig", "tofile"}
_WRITE_QUALIFIED = {("np", "save"), ("np", "savez"), ("np", "savez_compressed"), ("np", "savetxt"),
                    ("numpy", "save"), ("torch", "save"), ("json", "dump"), ("pickle", "dump"),
                    ("shutil", "copy"), ("shutil", "copyfile"), ("shutil", "copy2")}


def _mode(call: ast.Call, position: int) -> str | None:
    """The mode argument of an open() call, when literal (None: absent or not a literal)."""
    node = call.args[position] if len(call.args) > position else None
    for kw in call.keywords:
        if kw.arg == "mode":
            node = kw.value
    if node is None:
        return "r"
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _classify(call: ast.Call) -> str | None:
    """"read", "write" or None for a call."""
    f = call.func
    if isinstance(f, ast.Name) and f.id == "open":
        mode = _mode(call, 1)
        return "write" if mode is None or any(c in mode for c in "wax+") else "read"
    if not isinstance(f, ast.Attribute):
        return None
    owner = f.value.id if isinstance(f.value, ast.Name) else None
    if owner in ("filecheck", "safejson", "safewrite"):
        return None                           # the boundary itself
    if f.attr == "open" and owner not in ("zipfile", "tarfile", "gzip", "os"):
        if owner == "zf" or (call.args and isinstance(call.args[0], ast.Name)):
            return None                       # ZipFile.open(member): inside an archive already checked
        mode = _mode(call, 0)
        return "write" if mode is None or any(c in mode for c in "wax+") else "read"
    if (owner, f.attr) in _READ_QUALIFIED or (f.attr in _READ_ATTRS and owner not in ("st",)):
        return "read"
    if (owner, f.attr) in _WRITE_QUALIFIED or f.attr in _WRITE_ATTRS:
        return "write"
    if f.attr == "to_csv" and (call.args or any(kw.arg in ("path_or_buf",) for kw in call.keywords)):
        return "write"
    return None


def _scan() -> list[tuple[str, str, bool, int]]:
    """(kind, file, inside a write_atomic callback, line) of every reader and writer call."""
    found = []
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in BOUNDARY:
                continue
            tree = ast.parse(path.read_text(), rel)

            def visit(node, callback: bool):
                for child in ast.iter_child_nodes(node):
                    cb = callback
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                        cb = callback or "tmp" in [a.arg for a in child.args.args]
                    if isinstance(child, ast.Call):
                        kind = _classify(child)
                        if kind:
                            found.append((kind, rel, cb, child.lineno))
                    visit(child, cb)

            visit(tree, False)
    return found


def _top_function(tree: ast.Module, line: int) -> str:
    """The top-level function (or class.method) holding ``line`` (allow-lists name those)."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.lineno <= line <= node.end_lineno:
            return node.name
        if isinstance(node, ast.ClassDef) and node.lineno <= line <= node.end_lineno:
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.lineno <= line <= item.end_lineno:
                    return f"{node.name}.{item.name}"
            return node.name
    return "<module>"


@functools.lru_cache(maxsize=1)
def _findings():
    out = {"read": [], "write": []}
    trees: dict[str, ast.Module] = {}
    for kind, rel, callback, line in _scan():
        tree = trees.setdefault(rel, ast.parse((ROOT / rel).read_text()))
        top = _top_function(tree, line)
        out[kind].append((f"{rel}::{top}", callback, line))
    return out


def test_every_reader_goes_through_filecheck():
    bad = sorted({f"{key} (line {line})" for key, _cb, line in _findings()["read"] if key not in READERS_ALLOWED})
    assert not bad, ("these read a user's bytes without solvers.filecheck (use input_file, read_text, read_json, "
                     "iter_lines, load_npz, load_npy, load_torch; or list the function with a reason): "
                     + ", ".join(bad))


def test_every_writer_goes_through_safewrite():
    bad = sorted({f"{key} (line {line})" for key, callback, line in _findings()["write"]
                  if not callback and key not in WRITERS_ALLOWED})
    assert not bad, ("these write without solvers.safewrite.write_atomic (write the temporary file of a "
                     "write_atomic callback, whose parameter is tmp; or list the function with a reason): "
                     + ", ".join(bad))


def test_the_allow_lists_name_real_readers_and_writers():
    """An allowed function that no longer reads or writes is removed from its list (no stale exemptions)."""
    found = _findings()
    readers = {key for key, _cb, _l in found["read"]}
    writers = {key for key, _cb, _l in found["write"]}
    assert not set(READERS_ALLOWED) - readers, sorted(set(READERS_ALLOWED) - readers)
    assert not set(WRITERS_ALLOWED) - writers, sorted(set(WRITERS_ALLOWED) - writers)


def test_the_scan_sees_a_bypass(tmp_path):
    """The classifier catches the forms a bypass would take (so a pass above means something)."""
    src = ("import json, numpy as np, torch\n"
           "def f(p):\n    torch.load(p)\n    np.load(p)\n    json.loads(p.read_text())\n    open(p).read()\n"
           "    p.open('rb')\n"
           "def g(p, t):\n    p.write_text('x')\n    open(p, 'w')\n    np.save(p, t)\n    torch.save(t, p)\n"
           "    t.to_csv(p)\n"
           "def h(tmp):\n    tmp.write_text('x')\n")
    kinds = [(_classify(c), c.lineno) for c in ast.walk(ast.parse(src)) if isinstance(c, ast.Call)]
    reads = sorted(line for k, line in kinds if k == "read")
    writes = sorted(line for k, line in kinds if k == "write")
    assert reads == [3, 4, 5, 5, 6, 7] and writes == [9, 10, 11, 12, 13, 15]
