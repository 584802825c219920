"""shardc.compile and the callable it returns (docs/python.md)."""
import ctypes
import os
import shutil
import subprocess
import tempfile
import warnings
import weakref
from difflib import get_close_matches

import numpy as np

from . import _convert


class CompileError(Exception):
    """shardc refused the program; str() is its message (file:line:col: error: ...)."""


def shardc_binary():
    """The shardc that compile runs: $SHARDC, else the build tree's
    (python/../build/shardc), else the installed one beside this package
    (PREFIX/lib/python3.X/dist-packages/shardc -> PREFIX/bin/shardc), else
    shardc on PATH."""
    env = os.environ.get("SHARDC")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "..", "..", "build", "shardc"),
                 os.path.join(here, "..", "..", "..", "..", "bin", "shardc")):
        if os.access(cand, os.X_OK):
            return os.path.normpath(cand)
    found = shutil.which("shardc")
    if not found:
        raise FileNotFoundError("cannot find shardc: set SHARDC, or install it (make install)")
    return found


def _flag(value):
    """--mesh and --const values: a dict {"X": 2} or the command line's "X=2,Y=4"."""
    if value is None or isinstance(value, str):
        return value
    return ",".join("%s=%s" % (k, repr(v) if isinstance(v, float) else v) for k, v in value.items())


class _Source:
    """A path, or program text written to a temporary file for each shardc
    run (its messages then name it <source>)."""

    def __init__(self, source):
        text = None
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        elif "\n" in source or not (os.path.exists(source) or source.endswith(".tdsl")):
            text = source
        self.path, self.text = source, text

    def run(self, args):
        """Run shardc with args (the input as "{src}"); (status, stdout, stderr)."""
        tmp = tempfile.mkdtemp(prefix="shardc-py-") if self.text is not None else None
        try:
            path = self.path
            if tmp:
                path = os.path.join(tmp, "source.tdsl")
                with open(path, "w") as f:
                    f.write(self.text)
            p = subprocess.run([a.replace("{src}", path) for a in args], capture_output=True, text=True)
            err = p.stderr.replace(path, "<source>") if tmp else p.stderr
            return p.returncode, p.stdout, err
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)


def _parse_signature(text):
    sig = {"params": [], "results": [], "mesh": []}
    for line in text.splitlines():
        w = line.split()
        if w[0] == "fn":
            sig["fn"], sig["cname"] = w[1], w[2]
        elif w[0] == "mesh":
            sig["mesh"].append((w[1], int(w[2])))
        elif w[0] in ("param", "result"):
            rank = int(w[3])
            shape = tuple(int(d) for d in w[4:4 + rank])
            name = None if w[1] == "-" else w[1]
            sig[w[0] + "s"].append((name, w[2], shape))
    return sig


def _group_params(params):
    """The fn's parameters as written: [(name, [(flat index, field path or None)])];
    a record parameter p is its fields p.w1, ... (records are flattened)."""
    groups, where = [], {}
    for i, (name, _, _) in enumerate(params):
        top, _, rest = name.partition(".")
        if top not in where:
            where[top] = len(groups)
            groups.append((top, []))
        groups[where[top]][1].append((i, rest or None))
    return groups


def _group_results(results):
    """Consecutive results named r.f1, r.f2, ... are one record result (a
    dict); a field met again starts another.  Unnamed results are arrays."""
    groups = []
    for i, (name, _, _) in enumerate(results):
        top, _, rest = (name or "").partition(".")
        last = groups[-1] if groups else None
        if rest and last and last[0] == top and rest not in [f for _, f in last[1]]:
            last[1].append((i, rest))
        else:
            groups.append((top, [(i, rest or None)]))
    return groups


def _field(record, path, pname):
    """record's field at a dotted path: a dotted key, or nested dicts."""
    if path in record:
        return record[path]
    node = record
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise TypeError("record parameter '%s' has no field '%s' in the dict given (fields are given as nested "
                            "dicts or dotted keys)" % (pname, path))
        node = node[part]
    return node


def _check_fields(record, paths, pname):
    """No key of the dict names something that is not a field (a typo)."""
    def keys(node, prefix):
        for k, v in node.items():
            full = prefix + str(k)
            if full in paths:
                continue
            if isinstance(v, dict) and any(p.startswith(full + ".") for p in paths):
                yield from keys(v, full + ".")
            else:
                yield full
    for k in keys(record, ""):
        near = get_close_matches(k, paths, 1, 0.5)
        raise TypeError("record parameter '%s' has no field '%s'%s" % (
            pname, k, "; did you mean '%s'?" % near[0] if near else ""))


def _nest(fields):
    out = {}
    for path, value in fields:
        node = out
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


class Function:
    """A compiled function: call it with NumPy arrays (records as dicts).
    Keeps its session (the devices and their buffers) until close()."""

    def __init__(self, source, lib_path, sig_text, options, cast, backend):
        self._source, self._options, self.cast, self.backend = source, options, cast, backend
        self.signature = _parse_signature(sig_text)
        self.name = self.signature["fn"]
        self.mesh = dict(self.signature["mesh"])
        mode = ctypes.RTLD_GLOBAL if backend == "mpi" else ctypes.RTLD_LOCAL   # OpenMPI's plugins want libmpi global
        self._lib = ctypes.CDLL(lib_path, mode=mode)
        params, results = self.signature["params"], self.signature["results"]
        self._cfn = getattr(self._lib, self.signature["cname"])
        self._cfn.restype = ctypes.c_int
        self._cfn.argtypes = [ctypes.c_void_p] * (1 + len(params) + len(results))
        self._lib.sk_session_new.restype = ctypes.c_void_p
        self._lib.sk_session_new.argtypes = [ctypes.c_void_p]
        self._lib.sk_session_error.restype = ctypes.c_char_p
        self._lib.sk_session_error.argtypes = [ctypes.c_void_p]
        self._lib.sk_session_free.argtypes = [ctypes.c_void_p]
        self._lib.sk_session_carry.restype = ctypes.c_int
        self._lib.sk_session_carry.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        self._session = self._lib.sk_session_new(None)
        if not self._session:
            raise MemoryError("cannot make a session")
        self._finalizer = weakref.finalize(self, self._lib.sk_session_free, self._session)
        self._groups = _group_params(params)
        self._result_groups = _group_results(results)
        self._names = [g[0] for g in self._groups]
        self._mpi = backend == "mpi"
        self._last = {}              # id of a result of the last call -> (weak reference, its index)
        self.carried = 0             # parameters the last call took from the device blocks (no copy)

    def __repr__(self):
        return "<shardc.Function %s(%s) on mesh %s>" % (self.name, ", ".join(self._names), self.mesh or "{}")

    def close(self):
        """Free the session: the world (on MPI, MPI itself), the buffers and blocks."""
        self._finalizer()

    def _bind(self, args, kwargs):
        if len(args) > len(self._groups):
            raise TypeError("%s() takes %d arguments (%s) but %d were given" % (
                self.name, len(self._groups), ", ".join(self._names), len(args)))
        values = list(args) + [None] * (len(self._groups) - len(args))
        given = [True] * len(args) + [False] * (len(self._groups) - len(args))
        for k, v in kwargs.items():
            if k not in self._names:
                near = get_close_matches(k, self._names, 1, 0.5)
                raise TypeError("%s() has no parameter '%s'%s" % (
                    self.name, k, "; did you mean '%s'?" % near[0] if near else ""))
            i = self._names.index(k)
            if given[i]:
                raise TypeError("%s() got parameter '%s' twice" % (self.name, k))
            values[i], given[i] = v, True
        missing = [n for n, g in zip(self._names, given) if not g]
        if missing:
            raise TypeError("%s() is missing parameter%s %s" % (
                self.name, "s" if len(missing) > 1 else "", ", ".join("'%s'" % m for m in missing)))
        return values

    def arrays(self, *args, **kwargs):
        """The arrays a call with these arguments passes to the C, one per
        flattened parameter (a record's fields): the arguments themselves
        where their dtype and layout allow (no copy), else converted copies."""
        params = self.signature["params"]
        flat = [None] * len(params)
        for (pname, fields), value in zip(self._groups, self._bind(args, kwargs)):
            if fields[0][1] is None:
                i = fields[0][0]
                flat[i] = _convert.to_c(params[i][0], value, params[i][1], params[i][2], self.cast)
                continue
            if not isinstance(value, dict):
                raise TypeError("parameter '%s' is a record (fields %s): pass a dict" % (
                    pname, ", ".join(f for _, f in fields)))
            _check_fields(value, [f for _, f in fields], pname)
            for i, path in fields:
                flat[i] = _convert.to_c(params[i][0], _field(value, path, pname), params[i][1], params[i][2],
                                        self.cast)
        return flat

    def __call__(self, *args, **kwargs):
        if not self._finalizer.alive:
            raise RuntimeError("%s: the function was closed" % self.name)
        ins = self.arrays(*args, **kwargs)
        self.carried = self._carry(ins)
        outs = [_convert.empty_c(dt, shape) for _, dt, shape in self.signature["results"]]
        ptrs = [a.ctypes.data for a in ins] + [a.ctypes.data for a in outs]
        self._last = {}
        if self._cfn(self._session, *ptrs) != 0:
            raise RuntimeError("%s: %s" % (self.name, self._lib.sk_session_error(self._session).decode()))
        results = [_convert.from_c(a, dt) for a, (_, dt, _) in zip(outs, self.signature["results"])]
        for j, a in enumerate(results):
            a.flags.writeable = False            # so that one passed back unchanged can be carried
            self._last[id(a)] = (weakref.ref(a), j)
        grouped = [results[f[0][0]] if f[0][1] is None else _nest([(p, results[i]) for i, p in f])
                   for _, f in self._result_groups]
        return grouped[0] if len(grouped) == 1 else tuple(grouped)

    def _carry(self, ins):
        """A result of the last call passed back as it was returned (the
        same array, still read-only, so unchanged) is already in the
        devices' blocks: the session takes it from there instead of copying
        it in (sk_session_carry; the C checks that the blocks fit, else
        copies as usual).  Threads backend only.  Returns how many."""
        n = 0
        for i, a in enumerate(ins):
            ref = self._last.get(id(a)) if not self._mpi else None
            if ref and ref[0]() is a and not a.flags.writeable:
                n += self._lib.sk_session_carry(self._session, i, ref[1]) == 0
        return n

    def dump(self, stage="scheduled"):
        """The IR after a stage (parsed, sharded, partitioned, scheduled), as `shardc dump` prints it."""
        return _run_shardc(self._source, ["dump", "{src}", "--stage", stage, "--fn", self.name] + self._options)


def _run_shardc(source, args):
    rc, out, err = source.run([shardc_binary()] + args)
    if rc != 0:
        raise CompileError(err.strip() or "shardc exited with status %d" % rc)
    if err.strip():
        warnings.warn(err.strip(), stacklevel=3)
    return out


def compile(source, fn, mesh=None, const=None, backend="threads", cast=False, cache=True):
    """Compile fn of a program (a path, or its text) into a callable on NumPy arrays.

    mesh and const override the program's ({"X": 2} or "X=2"); backend is
    "threads" (one thread per device) or "mpi" (under mpirun: every process
    calls with the same arguments); cast=True rounds float64 arguments to a
    parameter's f32, bf16 or f16 as --cast does.  The shared library comes
    from shardc's build cache unless cache=False.  Raises CompileError."""
    if backend not in ("threads", "mpi"):
        raise ValueError("backend is 'threads' or 'mpi', not %r" % (backend,))
    src = _Source(source)
    options = []
    if mesh is not None:
        options += ["--mesh", _flag(mesh)]
    if const is not None:
        options += ["--const", _flag(const)]
    tmp = tempfile.mkdtemp(prefix="shardc-py-")
    try:
        lib = os.path.join(tmp, "prog.so")
        args = ["build", "{src}", "--fn", fn, "--shared", "-o", lib, "--backend", backend] + options
        _run_shardc(src, args + ([] if cache else ["--no-cache"]))
        with open(os.path.join(tmp, "prog.sig")) as f:
            sig = f.read()
        # Loaded, the library stays mapped after its file is removed.
        return Function(src, lib, sig, options, cast, backend)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
