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
