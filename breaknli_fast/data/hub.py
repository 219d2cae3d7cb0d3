"""Whether the Hugging Face hub answers, asked once per process before anything is fetched by hub id.

Without network, ``transformers`` and ``datasets`` retry each request and print multi-line warnings for half a
minute before they fail; one TCP connection to the hub's host (``HF_ENDPOINT``, default huggingface.co) answers
the same question in at most :data:`PROBE_SECONDS`, and the run stops with one line saying what to do. Offline
mode (``HF_HUB_OFFLINE=1``: only the local Hugging Face cache) asks nothing; nor does a configured proxy, whose
path to the hub only the libraries know.
"""

from __future__ import annotations

import functools
import os
import socket
import threading
from urllib.parse import urlsplit

from breaknli_fast.errors import UserError

PROBE_SECONDS = 3.0
DEFAULT_ENDPOINT = "https://huggingface.co"
_TRUE = ("1", "true", "yes", "on")
_PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


class HubUnreachable(UserError):
    """Something is asked of the Hugging Face hub and the hub does not answer."""


def offline() -> bool:
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


@functools.lru_cache(maxsize=None)
def _unreachable(url: str, timeout: float) -> str | None:
    """Why nothing answers at ``url``'s host and port (None when something does)."""
    parts = urlsplit(url)
    host = parts.hostname or url
    try:
        port = parts.port or (80 if parts.scheme == "http" else 443)
    except ValueError:
        return f"{url} is not a URL"
    answer: list[str | None] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                answer.append(None)
        except socket.timeout:
            answer.append(f"no answer within {timeout:g} s")
        except OSError as e:
            answer.append(e.strerror or str(e) or type(e).__name__)

    # on a thread: the name lookup before the connection is not bound by the socket's timeout
    worker = threading.Thread(target=connect, daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    return answer[0] if answer else f"no answer within {timeout:g} s (the name lookup of {host} hangs)"


def require_hub(what: str) -> None:
    """Raise a one-line :class:`HubUnreachable` when ``what`` (e.g. ``the model 'roberta-large-mnli'``) must be
    fetched from the hub and the hub does not answer; nothing in offline mode or behind a proxy."""
    if offline() or any(os.environ.get(k) for k in _PROXIES):
        return
    url = endpoint()
    reason = _unreachable(url, PROBE_SECONDS)
    if reason is not None:
        raise HubUnreachable(f"{what} comes from the Hugging Face hub, and {url} does not answer ({reason}); "
                             "check the network or HF_ENDPOINT, or set HF_HUB_OFFLINE=1 to use what your Hugging "
                             "Face cache holds")
