"""The one exception type for user mistakes (STYLE.md rule 11)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path


class ConfigError(ValueError):
    """A user-supplied value breaks a rule; the message names the value and the rule.

    Example: ``ConfigError("tp=3 must divide num_heads=32")``. One error may carry several ``problems`` (a file
    with many mistakes is reported at once, :func:`all_problems`).
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or [message]


EXTRAS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "run": ("PyTorch", ("torch",), ""),
    "traced": ("PyTorch and transformers", ("torch", "transformers"), ""),
    "recsys": ("TorchRec", ("torch", "fbgemm_gpu", "torchrec"), " && pip install --no-deps torchrec==1.8.0"),
    "gnn": ("PyTorch Geometric", ("torch", "torch_geometric"), ""),
    "fp8": ("torchao", ("torch", "torchao"), ""),
    "torchtitan": ("torchtitan", ("torch", "torchtitan"), ""),
}
"""Each optional extra of pyproject.toml: what it brings (in words), the modules it installs, and what its install
line needs after ``pip install`` of the extra (TorchRec is installed without its pinned dependencies)."""


def from_clone() -> bool:
    """Whether plait runs from a clone of its repository (installed editable, ``pip install -e .``, or a source tree
    on PYTHONPATH): the package sits in ``src/plait`` under the repository's ``pyproject.toml``. An install from
    PyPI, a wheel or a non-editable path puts it in ``site-packages``, with no project file above it."""
    project = Path(__file__).resolve().parents[2] / "pyproject.toml"
    return project.is_file() and 'name = "plait"' in project.read_text(encoding="utf-8")


def install_line(extra: str) -> str:
    """The command that installs ``extra``: ``pip install -e ".[run]"`` in a clone (:func:`from_clone`),
    ``pip install 'plait[run]'`` otherwise."""
    line = f'pip install -e ".[{extra}]"' if from_clone() else f"pip install 'plait[{extra}]'"
    return line + EXTRAS[extra][2]


MODULE_EXTRAS: dict[str, str] = {"torch": "run", "transformers": "traced", "fbgemm_gpu": "recsys", "torchrec": "recsys",
                                 "torch_geometric": "gnn", "torchao": "fp8", "torchtitan": "torchtitan"}
"""A module an extra installs -> that extra (the smallest one that brings it)."""


class MissingExtra(ConfigError):
    """A command needs an optional dependency that is not installed: one line naming what needs it, the missing
    module and the extra that installs it (``plait ... needs PyTorch (torch is not installed): pip install -e
    ".[run]"``, or ``pip install 'plait[run]'`` where plait is not run from a clone, :func:`install_line`). A
    ConfigError, so the command line prints it on one line and exits 2."""

    def __init__(self, what: str, extra: str, missing: str) -> None:
        super().__init__(f"{what} needs {EXTRAS[extra][0]} ({missing} is not installed): {install_line(extra)}")
        self.extra = extra
        self.missing = missing


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses it, or a module left half-imported
        return False


def require_extra(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extra`` can be imported (found, not imported: torch
    takes seconds); ``what`` names what needs it, e.g. ``"plait run --model GNN.toml"``. Called where a command
    first needs the extra and before it starts ranks, whose own import error would reach the user as a failed rank."""
    missing = next((m for m in EXTRAS[extra][1] if not _importable(m)), None)
    if missing is not None:
        raise MissingExtra(what, extra, missing)


def missing_extra(error: ModuleNotFoundError, what: str) -> MissingExtra | None:
    """``error`` as a :class:`MissingExtra` when the module it misses belongs to an extra, else None."""
    root = (error.name or "").split(".")[0]
    return MissingExtra(what, MODULE_EXTRAS[root], root) if root in MODULE_EXTRAS else None


def _name_key(name: str) -> str:
    """A name as :func:`did_you_mean` compares it: a hub id's last part, lower case, letters and digits only
    (``meta-llama/Meta-Llama-3-8B`` and ``llama3-8b`` both read ``llama38b``, less the owner's ``meta``)."""
    return "".join(c for c in name.rsplit("/", 1)[-1].lower() if c.isalnum())


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean a, b?"`` naming up to three of ``known`` closest to ``name`` (difflib's ratio over
    :func:`_name_key`, or one key inside the other), or ``""`` where none is close."""
    import difflib

    keys: dict[str, list[str]] = {}
    for candidate in known:
        keys.setdefault(_name_key(candidate), []).append(candidate)
    key = _name_key(name)
    close = difflib.get_close_matches(key, list(keys), n=3, cutoff=0.6) if key else []
    close += [k for k in keys if key and len(key) >= 3 and (key in k or k in key) and k not in close]
    names = [n for k in close[:3] for n in keys[k]][:3]
    return f"; did you mean {', '.join(names)}?" if names else ""


def all_problems(problems: list[str | ConfigError]) -> ConfigError:
    """One error for ``problems`` (messages or errors, whose own problems are listed one by one), on one line."""
    flat = [p for item in problems for p in (item.problems if isinstance(item, ConfigError) else [item])]
    return ConfigError(flat[0] if len(flat) == 1 else f"{len(flat)} problems: {'; '.join(flat)}", flat)


def read_user_file(path: Path, what: str) -> str:
    """The text of a user's file; missing, not a regular file, unreadable or not UTF-8 is a ConfigError naming
    ``what`` (e.g. ``"plan file"``) and the path."""
    shown = repr(str(path))
    if not path.exists():
        raise ConfigError(f"{what} {shown} does not exist")
    if not path.is_file():
        raise ConfigError(f"{what} {shown} is not a file")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{what} {shown} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start]:#04x})") from None
    except OSError as exc:
        raise ConfigError(f"{what} {shown} cannot be read ({exc.strerror})") from None


@contextmanager
def parsing(path: Path | str, what: str) -> Iterator[None]:
    """Around the parse of a user's file (JSON, TOML, YAML): what the standard parsers raise past their syntax errors
    is one line naming ``what`` and the path, as a syntax error is. Python's parsers recurse once per nesting level
    (a file nested deeper than the interpreter's recursion limit, ~1,000, raises ``RecursionError``) and refuse an
    integer of more than 4,300 digits (``sys.get_int_max_str_digits``, CVE-2020-10735: converting it is quadratic)."""
    shown = repr(str(path))
    try:
        yield
    except RecursionError:
        raise ConfigError(f"{what} {shown} nests its values too deeply to be read (Python's parsers follow at most "
                          "about 1,000 levels)") from None
    except ValueError as exc:
        if isinstance(exc, ConfigError) or "integer string conversion" not in str(exc):
            raise
        raise ConfigError(f"{what} {shown} holds an integer of more than 4,300 digits, which no field takes") from None


def check_writable(path: Path, what: str, *, folder: bool = False) -> None:
    """Raise unless ``path`` can be created or written: a folder (``folder``) or a file whose nearest existing
    ancestor is a writable folder; checked before long work starts, so that a search is not wasted."""
    import os

    shown = repr(str(path))
    if path.is_symlink() and not path.exists():
        raise ConfigError(f"{what} {shown} is a link to nothing ({str(path.readlink())!r})")
    if path.exists() and path.is_dir() != folder:
        raise ConfigError(f"{what} {shown} is {'a file, not a folder' if folder else 'a folder, not a file'}")
    ancestor = path if folder and path.exists() else path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"{what} {shown} cannot be created: {str(ancestor)!r} is a file")
    if not os.access(ancestor, os.W_OK | os.X_OK):
        raise ConfigError(f"{what} {shown} cannot be created: {str(ancestor)!r} is not writable")


def refuse_overwrite(path: Path | None, overwrite: bool) -> None:
    """Raise unless ``path`` is free or ``overwrite`` was asked for: no user file is replaced silently (and a
    path that cannot be written at all is refused at once, :func:`check_writable`)."""
    if path is None:
        return
    check_writable(path, "output file")
    if path.exists() and not overwrite:
        raise ConfigError(f"{str(path)!r} already exists (pass --force to replace it)")


def check_suffix(path: Path | None, suffix: str, option: str) -> None:
    """Raise unless ``path`` ends in ``suffix``: the format a writer picks from the name (matplotlib's ``savefig``
    refuses other formats after the work is done, and adds ``.png`` to a bare name, a file no overwrite check saw)."""
    if path is not None and path.suffix.lower() != suffix:
        raise ConfigError(f"{option} {str(path)!r} must end in {suffix}")


def check_export_folder(folder: Path, names: Iterable[str], overwrite: bool) -> None:
    """Before any work: ``folder`` can take the export and none of its files ``names`` would be replaced unless
    ``overwrite`` (:func:`check_writable`, :func:`refuse_overwrite`)."""
    check_writable(folder, "export folder", folder=True)
    for name in names:
        refuse_overwrite(folder / name, overwrite)
