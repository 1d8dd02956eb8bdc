"""A directory of configs on disk: every `**/config.json`, with an optional sibling
`model.safetensors.index.json` giving the checkpoint size (`metadata.total_size`).

The registry id of `<root>/<org>/<name>/config.json` is `<org>/<name>` (the path relative to the
root); a config directly in the root takes the root directory's name.
"""

from __future__ import annotations

from pathlib import Path

from models_registry.sources.common import (
    CONFIG_NAME,
    INDEX_NAME,
    ConfigSnapshot,
    ItemError,
    StageError,
    checkpoint_bytes_from_index,
    one_line,
    read_bytes,
)
from models_registry.walk import walk_tree


def model_id_for(config_path: Path, root: Path) -> str:
    relative = config_path.parent.resolve().relative_to(root.resolve())
    return relative.as_posix() if relative.parts else root.resolve().name


def read_model_dir(directory: Path, *, repo_id: str | None = None) -> ConfigSnapshot:
    """The snapshot of one model directory (config.json + optional safetensors index)."""
    config_path = directory / CONFIG_NAME
    if not config_path.is_file():
        raise StageError("read", f"no {CONFIG_NAME} in {directory}")
    return read_config_file(config_path, repo_id=repo_id)


def read_config_file(config_path: Path, *, repo_id: str | None = None, root: Path | None = None) -> ConfigSnapshot:
    """The snapshot of one config file; the sibling safetensors index is read when present.
    With `root`, neither file may be a link that leads out of it."""
    raw = read_bytes(config_path, root=root)
    index = config_path.parent / INDEX_NAME
    checkpoint = checkpoint_bytes_from_index(index, root=root) if index.is_file() or index.is_symlink() else None
    return ConfigSnapshot(
        repo_id=repo_id or config_path.parent.resolve().name,
        config_bytes=raw,
        source="local",
        source_path=str(config_path.resolve()),
        checkpoint_bytes=checkpoint,
    )


def scan_dir(root: Path) -> tuple[list[ConfigSnapshot], list[ItemError]]:
    """Every config under `root` (sorted by path), plus an error for each one that cannot be read.

    The walk is `models_registry.walk.walk_tree`: iterative, bounded in depth, entries and time,
    never following a link to a folder, hidden folders (.git, .cache) skipped. What its limits
    left out, and each folder it could not list, is one `catalog` error; the configs found are
    still read."""
    if not root.is_dir():
        raise NotADirectoryError(f"not a directory: {root}")
    snapshots: list[ConfigSnapshot] = []
    errors: list[ItemError] = []
    found = walk_tree(root, skip_hidden_dirs=True, name=CONFIG_NAME)
    for folder, problem in found.unreadable:
        shown = _shown(folder, root)
        errors.append(ItemError("catalog", shown, "read", one_line(f"{shown}: {problem}"), _text(str(folder))))
    if found.limited is not None:
        errors.append(ItemError("catalog", root.name or str(root), "read", one_line(found.limited), _text(str(root))))
    for config_path in found.files:
        try:
            repo_id = model_id_for(config_path, root)
        except ValueError:  # the folder itself is a link out of root
            repo_id = config_path.parent.name
        if not _is_text(repo_id):  # a folder name that is not UTF-8 (os.fsdecode gave surrogates)
            shown = _text(repo_id)
            reason = f"{shown}: the folder name is not valid UTF-8, so it cannot be a registry id"
            errors.append(ItemError("model", shown, "read", reason, _text(str(config_path))))
            continue
        try:
            snapshots.append(read_config_file(config_path, repo_id=repo_id, root=root))
        except StageError as exc:
            errors.append(ItemError("model", repo_id, exc.stage, str(exc), str(config_path)))
        except Exception as exc:  # whatever one file provokes, the others are still read
            reason = one_line(f"{repo_id}: cannot read {config_path.name}: {type(exc).__name__}: {exc}")
            errors.append(ItemError("model", repo_id, "read", reason, str(config_path)))
    return snapshots, errors


def _text(name: str) -> str:
    return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _shown(folder: Path, root: Path) -> str:
    relative = folder.relative_to(root).as_posix() if folder != root else (root.name or str(root))
    return one_line(_text(relative), 120)


def _is_text(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
