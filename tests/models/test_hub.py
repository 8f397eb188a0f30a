"""models.hub: the probe of the hub's host and offline mode, on local sockets only (no test reaches the network)."""

import socket
import sys
import time

import pytest

from models import hub


def closed_port():
  """A local port nothing listens on: a connection to it is refused at once."""
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.fixture
def probe_env(monkeypatch):
  """Hub access on (the suite turns it off), the probe's memory and huggingface_hub's offline flag restored."""
  monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
  monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
  monkeypatch.setitem(hub._state, "probed", None)
  constants = sys.modules.get("huggingface_hub.constants")
  if constants is not None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", constants.HF_HUB_OFFLINE)
  return monkeypatch


def test_an_unreachable_hub_switches_to_offline_mode_at_once(probe_env):
  port = closed_port()
  probe_env.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
  assert hub.host_port() == ("127.0.0.1", port)
  start = time.perf_counter()
  assert hub.prepare() is False
  assert time.perf_counter() - start < hub.PROBE_TIMEOUT_S + 1
  assert hub.is_offline()
  import huggingface_hub.constants
  assert huggingface_hub.constants.HF_HUB_OFFLINE is True
  assert f"(127.0.0.1:{port}) cannot be reached" in hub.unreachable_reason()


def test_a_reachable_host_is_used_online_and_probed_once(probe_env):
  with socket.socket() as server:
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    probe_env.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert hub.prepare() is True and not hub.is_offline() and hub.unreachable_reason() == ""
  probe_env.setattr(hub, "reachable", lambda *a, **k: pytest.fail("probed twice"))
  assert hub.prepare() is True  # the answer is kept for the process


def test_a_resolver_that_hangs_is_given_up_after_the_timeout(probe_env):
  def slow(*args, **kwargs):  # a resolver that answers after 5 s, as one without network can
    time.sleep(5)
    raise OSError("Temporary failure in name resolution")

  probe_env.setattr(socket, "create_connection", slow)
  start = time.perf_counter()
  assert hub.reachable("huggingface.co", 443, timeout=0.2) is False
  assert time.perf_counter() - start < 2


def test_offline_set_by_the_user_skips_the_probe(probe_env):
  probe_env.setenv("HF_HUB_OFFLINE", "1")
  probe_env.setattr(hub, "reachable", lambda *a, **k: pytest.fail("probed"))
  assert hub.prepare() is False
  assert hub.unreachable_reason() == "HF_HUB_OFFLINE is set, and it is not in the local hub cache"


def test_hub_ids_and_paths():
  for name in ("gpt2", "EleutherAI/pythia-70m", "bert-base-uncased", "swj0419/WikiMIA"):
    assert hub.is_hub_id(name), name
  for name in ("/nope", "./model", "~/model", "a/b/c", "runs/x/base_model", "model folder", ""):
    assert not hub.is_hub_id(name), name
