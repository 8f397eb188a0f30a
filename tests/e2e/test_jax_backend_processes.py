"""The jax backend of leave_one_out across devices and processes (subprocesses): sharded over 4 simulated CPU devices,
and two jax.distributed processes on localhost, each against the numpy backend."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from test_loo_jax import assert_backends_equal, plain_loo, ragged

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _python(code, env_extra, timeout=300):
  env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.path.join(ROOT, "tests", "lira"), **env_extra}
  return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT, capture_output=True,
                        text=True, timeout=timeout)


# (covariance, shared, balance_counts): plain and balanced leave-one-out both run their blocks on the devices
SHARDED_CASES = (("oas", False, False), ("oas", True, False), ("independent", False, False), ("oas", True, True),
                 ("independent", False, True))
# (covariance, fix_variance, balance_counts), shared fits
PROCESS_CASES = (("oas", False, False), ("independent", True, False), ("oas", False, True), ("univariate", False, True))


@pytest.mark.slow
def test_sharded_over_four_devices_equals_numpy(tmp_path):
  # XLA_FLAGS must be set before jax starts, so the 4 simulated CPU devices live in a subprocess.
  code = f"""
    import jax, numpy as np, lira
    from test_loo_jax import ragged
    assert jax.local_device_count() == 4
    loss, keep, mask = ragged(N=11)
    for cov, shared, bal in CASES:
      kw = dict(covariance=cov, shared=shared, mask_NxT=mask, balance_counts=bal, block_size=6)
      np.save("{tmp_path}/" + cov + str(shared) + str(bal) + ".npy", lira.leave_one_out(loss, keep, backend="jax", **kw))
  """.replace("CASES", repr(SHARDED_CASES))
  out = _python(code, {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"})
  assert out.returncode == 0, out.stderr[-3000:]
  loss, keep, mask = ragged(N=11)
  for cov, shared, bal in SHARDED_CASES:
    ref = plain_loo(loss, keep, covariance=cov, shared=shared, mask_NxT=mask, balance_counts=bal)
    assert_backends_equal(ref, np.load(tmp_path / f"{cov}{shared}{bal}.npy"))


def free_port():
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_equal_one(tmp_path):
  port = free_port()
  code = """
    import sys, numpy as np, lira
    from lira import loo_jax
    from test_loo_jax import ragged
    pid = int(sys.argv[1])
    loo_jax.initialize_processes("127.0.0.1:{port}", 2, pid)
    loss, keep, mask = ragged(N=13)
    for cov, fix, bal in {cases}:
      llr = lira.leave_one_out(loss, keep, covariance=cov, shared=True, fix_variance=fix, mask_NxT=mask,
                               balance_counts=bal, backend="jax", block_size=3)
      np.save("{out}/" + cov + str(bal) + str(pid) + ".npy", llr)
    six = [lira.Scoring(covariance=c, shared=s, backend="jax") for c in ("univariate", "independent", "oas")
           for s in (False, True)]  # one upload per block for all six, each gathered to every process
    np.save("{out}/six" + str(pid) + ".npy", np.stack(lira.leave_one_out_variants(loss, keep, six, mask_NxT=mask,
                                                                                  block_size=3)))
  """.format(port=port, out=tmp_path, cases=repr(PROCESS_CASES))
  env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.path.join(ROOT, "tests", "lira"), "JAX_PLATFORMS": "cpu"}
  procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), str(p)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for p in (0, 1)]
  for p in procs:
    _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
  loss, keep, mask = ragged(N=13)
  for cov, fix, bal in PROCESS_CASES:
    ref = plain_loo(loss, keep, covariance=cov, shared=True, fix_variance=fix, mask_NxT=mask, balance_counts=bal)
    for pid in (0, 1):  # every process gets all the scores
      assert_backends_equal(ref, np.load(tmp_path / f"{cov}{bal}{pid}.npy"))
  six = np.stack([plain_loo(loss, keep, covariance=c, shared=s, mask_NxT=mask, balance_counts=True)
                  for c in ("univariate", "independent", "oas") for s in (False, True)])
  for pid in (0, 1):
    assert_backends_equal(six, np.load(tmp_path / f"six{pid}.npy"))
