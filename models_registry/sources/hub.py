"""Hugging Face Hub configs, offline first: the bundled snapshot, then the local HF cache
(`local_files_only=True`), then the Hub itself only when online (`HF_HUB_OFFLINE` unset).

One thin wrapper over `huggingface_hub.hf_hub_download`. Before it goes to the network, one HEAD
without retries (`get_hf_file_metadata(retry_on_errors=False)`, HUB_PROBE_TIMEOUT_S): a dead network
otherwise costs ~25 s of hf_hub_download's backoff and ends in a `LocalEntryNotFoundError` that reads
like a missing file. The token comes from the argument or
`HF_TOKEN` (else huggingface_hub's own login); it is passed to the library and nowhere else:
never printed, logged or stored.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from models_registry.sources import bundled
from models_registry.sources.common import (
    CONFIG_NAME,
    INDEX_NAME,
    ConfigSnapshot,
    StageError,
    checkpoint_bytes_from_index,
    one_line,
    read_bytes,
)

_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_TRUE = {"1", "true", "yes", "on"}
HUB_PROBE_TIMEOUT_S = 5.0  # connect + read of the one HEAD that decides whether the Hub is reachable


class HubError(LookupError):
    """A config that cannot be fetched (not cached while offline, gated, missing); one line."""


class HubUnreachable(HubError):
    """The Hub (HF_ENDPOINT) did not answer: no network, a proxy, a wrong endpoint."""


def hub_offline() -> bool:
    """Offline mode, from the environment now or as huggingface_hub read it at import."""
    from huggingface_hub import constants

    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE or bool(constants.HF_HUB_OFFLINE)


def _revision_from_path(path: Path) -> str | None:
    """The commit hash of a hub-cache path `.../snapshots/<commit>/config.json`."""
    snapshot = path.parent
    if snapshot.parent.name == "snapshots" and _COMMIT.match(snapshot.name):
        return snapshot.name
    return None


def _download(
    repo_id: str, filename: str, revision: str | None, cache_dir: Path | str | None, token: str | None, local: bool
) -> Path:
    from huggingface_hub import hf_hub_download

    path = hf_hub_download(
        repo_id,
        filename,
        revision=revision,
        cache_dir=cache_dir,
        token=token,
        local_files_only=local,
    )
    return Path(str(path))


def _probe(repo_id: str, revision: str | None, token: str | None) -> None:
    """One HEAD on the repo's config.json, no retries; raises the Hub's error as `HubError`."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo_id, CONFIG_NAME, revision=revision)
    try:
        get_hf_file_metadata(url, token=token, timeout=HUB_PROBE_TIMEOUT_S, retry_on_errors=False)
    except Exception as exc:
        raise _access_error(repo_id, exc) from None


def _access_error(repo_id: str, exc: BaseException) -> HubError:
    from huggingface_hub import constants
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(exc, GatedRepoError):
        return HubError(
            f"{repo_id} is gated: accept its license on huggingface.co, then set HF_TOKEN to a token with access"
        )
    if isinstance(exc, RevisionNotFoundError):
        return HubError(f"{repo_id}: revision not found on the Hub")
    if isinstance(exc, RepositoryNotFoundError):
        return HubError(
            f"{repo_id}: repository not found or private (401/404); check the id, or set HF_TOKEN if it is private"
        )
    if isinstance(exc, RemoteEntryNotFoundError):  # before HfHubHTTPError: it is one (a 404 on the file)
        return HubError(f"{repo_id} has no {CONFIG_NAME} on the Hub")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            return HubError(f"{repo_id}: access denied ({status}); set HF_TOKEN to a token with access to this repo")
        return HubError(f"{repo_id}: the Hub answered HTTP {status}")
    # A connect error or timeout; hf_hub_download's LocalEntryNotFoundError ("not in the cache and the
    # HEAD failed") is an EntryNotFoundError too, but it means the same: the Hub was not reached.
    cause = exc.__cause__ if isinstance(exc, LocalEntryNotFoundError) and exc.__cause__ else exc
    return HubUnreachable(
        one_line(
            f"{repo_id}: cannot reach the Hugging Face Hub at {constants.ENDPOINT} ({type(cause).__name__}) and it "
            "is not in the local cache; check the network (or HF_ENDPOINT), or work offline with HF_HUB_OFFLINE=1 "
            "(bundled and cached configs only)"
        )
    )


def _snapshot(
    repo_id: str,
    config_path: Path,
    source: str,
    revision: str | None,
    cache_dir: Path | str | None,
    token: str | None,
    local: bool,
) -> ConfigSnapshot:
    try:
        raw = read_bytes(config_path)
    except StageError as exc:
        raise HubError(str(exc)) from None
    resolved = _revision_from_path(config_path) or revision
    checkpoint = None
    try:
        index_path = _download(repo_id, INDEX_NAME, resolved, cache_dir, token, local)
    except Exception:  # no index (single-file or non-safetensors checkpoint), or not cached
        index_path = None
    if index_path is not None:
        try:
            checkpoint = checkpoint_bytes_from_index(index_path)
        except StageError as exc:
            raise HubError(f"{repo_id}: {exc}") from None
    return ConfigSnapshot(
        repo_id=repo_id,
        config_bytes=raw,
        source=source,
        source_path=str(config_path),
        revision=resolved,
        checkpoint_bytes=checkpoint,
        source_url=f"https://huggingface.co/{repo_id}/blob/{resolved or 'main'}/{CONFIG_NAME}",
    )


def fetch_config(
    repo_id: str,
    revision: str | None = None,
    *,
    cache_dir: Path | str | None = None,
    token: str | None = None,
    use_bundled: bool = True,
    allow_network: bool = True,
) -> ConfigSnapshot:
    """The config.json of `repo_id` (at `revision`), offline first. Raises `HubError`.

    The snapshot records the resolved revision (the commit hash of the cache snapshot) and its
    sha256 (`.config_sha256`).
    """
    from huggingface_hub.errors import LocalEntryNotFoundError

    if use_bundled:
        entry = bundled.find_entry(repo_id)
        if entry is not None and revision in (None, entry.revision):
            try:
                return bundled.snapshot_of(entry)
            except StageError as exc:
                raise HubError(str(exc)) from None

    auth = token or os.environ.get("HF_TOKEN") or None
    try:
        path = _download(repo_id, CONFIG_NAME, revision, cache_dir, auth, local=True)
        return _snapshot(repo_id, path, "hf-cache", revision, cache_dir, auth, local=True)
    except LocalEntryNotFoundError:
        pass
    except ValueError as exc:  # HFValidationError: not a valid repo id
        raise HubError(one_line(f"{repo_id!r} is not a valid Hugging Face repo id: {exc}")) from None

    at = f"@{revision}" if revision else ""
    if not allow_network:
        raise HubError(f"{repo_id}{at} is not in the local Hugging Face cache")
    if hub_offline():
        raise HubError(f"{repo_id}{at} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set")
    _probe(repo_id, revision, auth)
    try:
        path = _download(repo_id, CONFIG_NAME, revision, cache_dir, auth, local=False)
    except Exception as exc:
        raise _access_error(repo_id, exc) from None
    return _snapshot(repo_id, path, "hub", revision, cache_dir, auth, local=False)
