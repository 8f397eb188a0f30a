"""The Hugging Face hub, reached only where a hub id is given, and failing fast where it cannot be reached.

Without a network, huggingface_hub retries each request for about 24 seconds before it reports the failure. Every
seqlira call that may go to the hub (a tokenizer or model given as a hub id, WikiMIA, MIMIR, PersonaChat, a
fill-mask model) first calls `prepare()`: one quick TCP connection to the hub's host (HF_ENDPOINT, default
huggingface.co) with a short timeout, once per process. When the host cannot be reached, HF_HUB_OFFLINE=1 is set,
so files already in the local hub cache still load and anything else fails at once; the error then says the hub
was unreachable and how to pass a local copy. HF_HUB_OFFLINE=1 set by the user skips the probe.
"""

import os
import re
import socket
import sys
import threading
import urllib.parse

DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_TIMEOUT_S = 3.0
_TRUE = {"1", "ON", "YES", "TRUE"}
_state = {"probed": None}  # endpoint -> reachable, for this process


def endpoint():
  """The hub endpoint huggingface_hub uses (HF_ENDPOINT, default https://huggingface.co)."""
  return os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT


def host_port(url=None):
  """(host, port) of the hub endpoint."""
  parsed = urllib.parse.urlsplit(url or endpoint())
  return parsed.hostname or "huggingface.co", parsed.port or (80 if parsed.scheme == "http" else 443)


def is_offline():
  """Whether hub access is switched off (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE), by the user or by prepare()."""
  return any(os.environ.get(k, "").upper() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def reachable(host, port, timeout=PROBE_TIMEOUT_S):
  """Whether a TCP connection to host:port opens within `timeout` seconds (name resolution included: it runs in a
  thread that is abandoned when it takes longer, as a resolver without network can)."""
  result = []

  def connect():
    try:
      socket.create_connection((host, port), timeout=timeout).close()
      result.append(True)
    except OSError:
      result.append(False)

  thread = threading.Thread(target=connect, daemon=True)
  thread.start()
  thread.join(timeout)
  return bool(result and result[0])


def set_offline():
  """HF_HUB_OFFLINE=1 for this process: in the environment and in the hub libraries already imported (they read
  it once, at import)."""
  os.environ["HF_HUB_OFFLINE"] = "1"
  constants = sys.modules.get("huggingface_hub.constants")
  if constants is not None:
    constants.HF_HUB_OFFLINE = True
  config = sys.modules.get("datasets.config")
  if config is not None:
    config.HF_HUB_OFFLINE = True
    config.HF_DATASETS_OFFLINE = True


def prepare():
  """Call before any hub request: probe the hub's host once per process; unreachable -> offline mode (cached
  files only, no retries). Returns whether the hub may be used online."""
  if is_offline():
    return False
  url = endpoint()
  if _state["probed"] is None or _state["probed"][0] != url:
    _state["probed"] = (url, reachable(*host_port(url)))
  if not _state["probed"][1]:
    set_offline()
  return _state["probed"][1]


def unreachable_reason():
  """Why a hub request failed, when hub access is off: a short clause for an error message ('' when online)."""
  if not is_offline():
    return ""
  if _state["probed"] is not None and not _state["probed"][1]:
    host, port = host_port(_state["probed"][0])
    return f"the Hugging Face hub ({host}:{port}) cannot be reached from here, and it is not in the local hub cache"
  return "HF_HUB_OFFLINE is set, and it is not in the local hub cache"


def is_hub_id(name):
  """Whether `name` can be a hub repo id ('gpt2', 'EleutherAI/pythia-70m') rather than a local path."""
  name = str(name)
  return (not name.startswith((".", "/", "~")) and name.count("/") <= 1
          and re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?", name) is not None)
