"""A static gate for untrusted candidate code (an agent's output), applied before it is queued.

`screen` parses the source and checks that it defines `build`, stays under a size limit, imports only
the allowed modules and uses none of the escape hatches to processes, the network, the filesystem or the
interpreter's internals. It is a first filter, not a sandbox: Python is too dynamic for a static check to
be complete, so the engine's worker process (time and memory bounds, crash isolation) stays the real
boundary. What it does catch, it reports in full: every reason, each with its line.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from polyinfer.engine.candidate import Candidate

MAX_BYTES = 64_000

ALLOWED_MODULES = (
    "__future__",
    "torch",
    "triton",
    "math",
    "functools",
    "itertools",
    "dataclasses",
    "typing",
    "collections",
    "numpy",
    "polyinfer.engine",
    "polyinfer.kernels",
    "polyinfer.candidates",
    "polyinfer.models.spec",  # the record types a forward pass is typed against, nothing that loads
    "polyinfer.models.weights",
)

# Modules not allowed anyway, named so that a rejection says why they are dangerous.
ESCAPE_MODULES = {
    "os": "process and filesystem access",
    "sys": "interpreter internals",
    "subprocess": "starts processes",
    "socket": "network access",
    "shutil": "filesystem access",
    "ctypes": "raw memory and native code",
    "multiprocessing": "starts processes",
    "threading": "starts threads",
    "signal": "process signals",
    "importlib": "imports arbitrary modules",
    "pathlib": "filesystem access",
    "builtins": "interpreter internals",
    "io": "filesystem access",
    "pickle": "runs arbitrary code on load",
}

# Parts of allowed packages that reach outside the computation.
DENIED = {
    "torch.load": "reads pickled files",
    "torch.save": "writes files",
    "torch.from_file": "reads files",
    "torch.hub": "downloads and runs code",
    "torch.utils.cpp_extension": "compiles and loads native code",
    "torch.ops.load_library": "loads native code",
    "torch.classes.load_library": "loads native code",
    "torch.multiprocessing": "starts processes",
    "torch.distributed": "network access",
    "numpy.load": "reads pickled files",
    "numpy.save": "writes files",
    "numpy.savez": "writes files",
    "numpy.savetxt": "writes files",
    "numpy.loadtxt": "reads files",
    "numpy.fromfile": "reads files",
    "numpy.memmap": "maps files",
    "numpy.ctypeslib": "native code",
    "polyinfer.engine.worker": "starts processes",
    "polyinfer.engine.supervisor": "starts processes",
    "polyinfer.engine.candidate.import_candidate": "runs arbitrary source",
}

DENIED_NAMES = {
    "open": "file access",
    "exec": "runs arbitrary code",
    "eval": "runs arbitrary code",
    "compile": "compiles arbitrary code",
    "__import__": "imports arbitrary modules",
    "globals": "reaches module internals",
    "locals": "reaches frame internals",
    "vars": "reaches object internals",
    "breakpoint": "blocks the worker",
    "input": "blocks the worker",
    "__builtins__": "interpreter internals",
    "__loader__": "interpreter internals",
}

DENIED_ATTRIBUTES = {
    **dict.fromkeys(
        (
            "__subclasses__",
            "__globals__",
            "__builtins__",
            "__code__",
            "__closure__",
            "__mro__",
            "__bases__",
            "__base__",
            "__loader__",
            "__import__",
        ),
        "reaches interpreter internals",
    ),
    **dict.fromkeys(
        ("f_globals", "f_locals", "f_builtins", "f_back", "gi_frame", "cr_frame", "ag_frame", "tb_frame"),
        "reaches interpreter frames",
    ),
    "tofile": "writes files",
}

_ATTRIBUTE_FUNCTIONS = ("getattr", "setattr", "delattr", "hasattr")


@dataclass(frozen=True, slots=True)
class ScreenResult:
    ok: bool
    reasons: tuple[str, ...]  # why it was rejected, one line each; empty when ok


def screen(candidate: Candidate, max_bytes: int = MAX_BYTES) -> ScreenResult:
    """Check `candidate.source` statically; every problem found becomes one human-readable reason."""
    source = candidate.source
    reasons: list[str] = []
    size = len(source.encode())
    if size > max_bytes:
        reasons.append(f"the source is {size} bytes, over the limit of {max_bytes}")
    if not source.strip():
        return ScreenResult(False, (*reasons, "the source is empty"))
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return ScreenResult(False, (*reasons, f"line {e.lineno}: syntax error: {e.msg}"))
    if not defines_build(tree):
        reasons.append("it defines no top-level build(ctx) function")
    reasons.extend(dict.fromkeys(hazards(tree)))  # each reason once, in source order
    return ScreenResult(not reasons, tuple(reasons))


def defines_build(tree: ast.Module) -> bool:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "build":
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "build" for t in targets):
                return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == "build" for a in node.names):
            return True
    return False


def hazards(tree: ast.Module) -> list[str]:
    """Every use of a forbidden import, name or attribute, as 'line N: ...', in source order."""
    aliases: dict[str, str] = {}  # local name -> the module path (or module attribute) it stands for
    found: list[tuple[int, str]] = []
    bound = bound_names(tree)
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for a in node.names:
                found.extend((line, r) for r in import_problems(a.name))
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for a in node.names:
                found.extend((line, r) for r in import_problems(module, a.name))
                aliases[a.asname or a.name] = f"{module}.{a.name}"
        elif isinstance(node, ast.Name) and node.id in DENIED_NAMES and node.id not in bound:
            found.append((line, f"uses {node.id} ({DENIED_NAMES[node.id]})"))
        elif isinstance(node, ast.Attribute) and node.attr in DENIED_ATTRIBUTES:
            found.append((line, f"accesses .{node.attr} ({DENIED_ATTRIBUTES[node.attr]})"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in _ATTRIBUTE_FUNCTIONS
        ):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and name.value in DENIED_ATTRIBUTES:
                why = DENIED_ATTRIBUTES[name.value]
                found.append((line, f"accesses .{name.value} through {node.func.id} ({why})"))
    for node in ast.walk(tree):
        path = dotted(node, aliases)
        denied = next((d for d in DENIED if path == d or path.startswith(d + ".")), None) if path else None
        if denied:
            found.append((getattr(node, "lineno", 0), f"uses {denied} ({DENIED[denied]})"))
    return [f"line {line}: {reason}" for line, reason in sorted(found, key=lambda f: f[0])]


def bound_names(tree: ast.Module) -> set[str]:
    """Names the source binds itself (a parameter called `input` is not the builtin)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
    return bound - {"__builtins__", "__loader__"}


def import_problems(module: str, name: str | None = None) -> list[str]:
    """Why importing `module` (or `name` from it) is not allowed; [] when it is."""
    if module.startswith("."):
        return [f"imports {module} (relative imports have no package here)"]
    root = module.split(".")[0]
    if root in ESCAPE_MODULES:
        return [f"imports {module} ({ESCAPE_MODULES[root]})"]
    full = f"{module}.{name}" if name else module
    denied = next((d for d in DENIED if full == d or full.startswith(d + ".")), None)
    if denied:
        return [f"imports {full} ({DENIED[denied]})"]
    if any(full == a or full.startswith(a + ".") for a in ALLOWED_MODULES):
        return []
    return [f"imports {full}, which is not allowed (allowed: {', '.join(ALLOWED_MODULES[1:])})"]


def dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """The module path an attribute chain (or a bare imported name) refers to, e.g. 'torch.hub.load'."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])
