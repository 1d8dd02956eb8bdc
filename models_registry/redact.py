"""Secrets out of everything capplan stores or shows: telemetry, registry URLs, error messages.

People paste logs and commands as they are: `HF_TOKEN=hf_...` on a `docker run` line, `'hf_token':
'hf_...'` in vLLM's non-default args, `Authorization: Bearer ...` from a curl, an `--api-key`, a
database URL with its password. `redact(text)` replaces the secret part with `[REDACTED]` and keeps
the rest (so the line still says what it was). A URL's userinfo (`scheme://user:pass@host`) is
replaced whole, up to the last `@`, whatever characters the password holds (`_userinfo`). Telemetry
applies it to every string column of every frame (excerpts, reasons, labels, names, notes), so no
path around it reaches the warehouse, Dagster's run storage (metadata previews) or the logs; the
registry applies it to its URL and to every database error it shows. It lives in the registry's
package, the lowest layer that shows or stores text, so both can use the one rule.
"""

from __future__ import annotations

import re
from collections.abc import Callable

MARK = "[REDACTED]"

# Token formats that are secrets wherever they appear.
_TOKENS = re.compile(
    r"""
    hf_[A-Za-z0-9]{30,}                       # Hugging Face (hf_ + 34), even glued to a word
    | \bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{20,}  # OpenAI / Anthropic style API keys
    | \b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{16,} | \bgithub_pat_[A-Za-z0-9_]{16,}
    | \bglpat-[A-Za-z0-9_\-]{16,}             # GitLab
    | \bxox[abprs]-[A-Za-z0-9\-]{8,}           # Slack
    | \b(?:AKIA|ASIA)[0-9A-Z]{16}\b            # AWS access key ids
    | \beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}  # JWTs
    """,
    re.VERBOSE,
)
# `Authorization: <scheme> <credentials>` and a bare `Bearer <token>`.
_AUTH = re.compile(r"(?i)(\bauthorization\b['\"]?\s*[:=]\s*['\"]?)(?:(?:bearer|basic|token|digest)\s+)?[^\s'\",}]+")
_BEARER = re.compile(r"(?i)(\bbearer\s+)[A-Za-z0-9._~+/\-]+=*")
# key = value / key: value / 'key': 'value' / --key value / --key=value, for secret-looking keys.
# The key ends in the secret word: `hf_token`, `HUGGING_FACE_HUB_TOKEN`, `db_password`, `api-key`;
# not `max_num_batched_tokens` or `tokenizer`.
_SECRET_KEY = (
    r"[A-Za-z0-9_.\-]*(?:token|secret|password|passwd|pwd|api[_\-]?key|apikey|access[_\-]?key|"
    r"private[_\-]?key|credentials?|auth|signature)(?![A-Za-z0-9_])"
)
# `\[REDACTED\]` first: a value already redacted is matched whole and kept (redact is idempotent:
# excerpts are redacted before they are cut, and again with every frame string).
_ASSIGNMENT = re.compile(
    r"(?i)(\b" + _SECRET_KEY + r"['\"]?\s*(?:=|:)\s*)(?:\[REDACTED\]|'[^']*'|\"[^\"]*\"|[^\s,;&'\"}\])]+)"
)
_FLAG = re.compile(r"(?i)(--" + _SECRET_KEY + r"(?:\s+|=))(?:'[^']*'|\"[^\"]*\"|[^\s'\"-][^\s'\"]*)")
# scheme:// (or a bare ://): the userinfo of what follows is everything up to the LAST `@` of the text
# (see `_userinfo`).
_SCHEME = re.compile(r"(?i)(?:\b[a-z][a-z0-9+.\-]*)?://")
# Words one of the patterns needs: a text holding none of them (most telemetry lines) is returned
# as it is after a few substring searches of its lower-case form (one case-insensitive regex
# alternation of these costs ~40 us a line, the searches ~2 us).
_NEEDLES = (
    "hf_",
    "sk-",
    "gh",
    "glpat",
    "xox",
    "akia",
    "asia",
    "eyj",
    "auth",
    "bearer",
    "token",
    "secret",
    "passw",
    "pwd",
    "key",
    "credential",
    "signature",
    "://",
)


def redact(text: str) -> str:
    """`text` with every secret it holds replaced by `[REDACTED]`."""
    lower = text.lower()
    if not any(needle in lower for needle in _NEEDLES):
        return text
    text = _userinfo(text)
    text = _AUTH.sub(lambda m: m.group(1) + MARK, text)
    text = _BEARER.sub(lambda m: m.group(1) + MARK, text)
    text = _FLAG.sub(lambda m: m.group(1) + MARK, text)
    text = _ASSIGNMENT.sub(_assignment, text)
    return _TOKENS.sub(MARK, text)


def redact_head(text: str, length: int, prepare: Callable[[str], str] | None = None) -> str:
    """`redact(prepare(text[:length]))`, safe when the cut falls inside a URL's userinfo: when an
    `@` follows the cut, everything after the head's first `scheme://` is replaced (the head cannot
    tell where that userinfo ends). For messages and excerpts cut before they are redacted."""
    head = text[:length]
    head = prepare(head) if prepare is not None else head
    if len(text) > length and "@" in text[length:] and (m := _SCHEME.search(head)) is not None:
        head = head[: m.end()] + MARK
    return redact(head)


def redact_url(url: str) -> str:
    """A URL (or what was meant to be one) as it may be shown: `redact`, and where no scheme comes
    before its last `@` (`user:pass@host:9090`), everything before that `@` replaced too."""
    text = redact(url)
    at = text.rfind("@")
    if at >= 0 and not _SCHEME.search(text, 0, at):
        text = MARK + text[at:]
    return text


def _userinfo(text: str) -> str:
    """Every `scheme://userinfo@` with the userinfo replaced, whatever it holds.

    A password pasted unencoded may hold `/ ? # [ ] @ :`, spaces or anything else, so the URL does
    not parse and no character can be trusted to end the userinfo except the host's `@`, the last
    one: everything from `://` to the last `@` of the text is replaced (a later `@` that is not a
    URL's costs some text, never a secret). `scheme://host` without `@` is kept as it is.
    """
    out: list[str] = []
    pos = 0
    while (m := _SCHEME.search(text, pos)) is not None:
        at = text.rfind("@", m.end())
        if at < 0:
            break
        out.append(text[pos : m.end()] + MARK + "@")
        pos = at + 1
    out.append(text[pos:])
    return "".join(out)


def _assignment(m: re.Match[str]) -> str:
    """`key=value` with the value redacted, unless it is empty, None or already redacted."""
    value = m.group(0)[len(m.group(1)) :]
    bare = value.strip("'\"")
    keep = not bare or MARK in bare or bare.lower() in ("none", "null", "false")
    return m.group(0) if keep else m.group(1) + MARK
