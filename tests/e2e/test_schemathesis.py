"""schemathesis over the seed API contract (spec/combined.openapi.yaml, a copy of
../shared/spec/combined.openapi.yaml): generated and mutated requests for all ten
operations, as the admin user, must never get a 5xx, and every documented response must
match the schema the contract gives it.

Only checks that hold under Kubernetes semantics run: the contract leaves out status codes
kube-apiserver answers (422 Invalid, 409 Conflict, 415, ...), so `status_code_conformance`
would fail on correct answers; `negative_data_rejection`/`positive_data_acceptance` judge by
the contract's loose schemas, while the server validates far more (names, labels, the
namespace in the body against the path) and accepts what kube accepts (`limit=-1`).

Bounded: `VIRTPLANE_SCHEMATHESIS_EXAMPLES` examples per operation (default 25) and
`VIRTPLANE_SCHEMATHESIS_SECONDS` for the whole run (default 150). The seed is random and
printed; `VIRTPLANE_SCHEMATHESIS_SEED` replays one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import vm_manifest

SPEC = Path(__file__).resolve().parent / "spec" / "combined.openapi.yaml"
CHECKS = "not_a_server_error,response_schema_conformance,content_type_conformance"
# Objects the generated names hit most of the time, so that reads, replaces, patches and
# deletes reach real objects instead of 404s (several, as the run deletes some).
NAMES = [f"st-vm-{i}" for i in range(6)]


def required() -> bool:
    """A tool that is missing fails the test in CI (as oci::testing::required decides)."""
    return any(os.environ.get(v, "") not in ("", "0") for v in ("CI", "VIRTPLANE_REQUIRE_QEMU"))


def schemathesis_command() -> list[str]:
    try:
        import schemathesis  # noqa: F401
    except ImportError:
        why = ("SCHEMATHESIS NOT INSTALLED: the API contract fuzz test did not run "
               "(pip install -r tests/e2e/requirements.txt)")
        if required():
            pytest.fail(why + ", and CI or VIRTPLANE_REQUIRE_QEMU is set")
        pytest.skip(why)
    # The interpreter that imported it, whatever is on PATH.
    return [sys.executable, "-m", "schemathesis.cli"]


def test_the_contract_holds_under_generated_requests(server, tmp_path):
    command = schemathesis_command()
    for name in NAMES:
        server.create_vm(name)
    config = tmp_path / "schemathesis.toml"
    quoted = ", ".join(f'"{n}"' for n in NAMES)
    # Namespaces other than `default` do not exist (404 everywhere); names and the body's
    # name are drawn from NAMES most of the time and generated otherwise.
    config.write_text(
        f"""
[dictionaries.names]
values = [{quoted}]

[parameters]
"path.namespace" = "default"
"path.name" = {{ dictionary = "names", probability = 0.8 }}
"body.metadata.name" = {{ dictionary = "names", probability = 0.5 }}
"""
    )
    # Deletes run last, on their own: run with the rest they removed every object early
    # and left reads, replaces and patches with nothing but 404s.
    seconds = int(os.environ.get("VIRTPLANE_SCHEMATHESIS_SECONDS", "150"))
    run_schemathesis(server, command, config, tmp_path / "most", ["--exclude-method", "DELETE"],
                     seconds * 4 // 5, operations=8)
    run_schemathesis(server, command, config, tmp_path / "deletes", ["--include-method", "DELETE"],
                     max(seconds // 5, 10), operations=2)
    # The server is still there and answering.
    assert server.raw("GET", "/readyz", auth=False).status == 200


def run_schemathesis(server, command, config, workdir: Path, select: list[str], seconds: int,
                     operations: int):
    workdir.mkdir()
    pki = server.dir / "client-pki"
    args = [
        *command, "--config-file", str(config), "run", str(SPEC),
        "--url", server.url,
        "--tls-verify", str(server.ca_file),
        "--request-cert", str(pki / "client.crt"), "--request-cert-key", str(pki / "client.key"),
        "--checks", CHECKS,
        "--max-examples", os.environ.get("VIRTPLANE_SCHEMATHESIS_EXAMPLES", "25"),
        "--max-time", str(seconds),
        # One worker: hypothesis is not thread-safe and failed with an internal error on two.
        "--workers", "1",
        "--request-timeout", "30",
        "--report", "junit,har", "--report-dir", str(workdir / "report"),
        *select,
    ]
    if os.environ.get("VIRTPLANE_SCHEMATHESIS_SEED"):
        args += ["--seed", os.environ["VIRTPLANE_SCHEMATHESIS_SEED"]]
    proc = subprocess.run(args, capture_output=True, text=True, cwd=workdir,
                          env={**os.environ, "NO_COLOR": "1", "SCHEMATHESIS_HOOKS": "schemathesis_hooks",
                               "PYTHONPATH": str(Path(__file__).resolve().parent),
                               "VIRTPLANE_ST_URL": server.url, "VIRTPLANE_ST_CA": str(server.ca_file),
                               "VIRTPLANE_ST_CERT": str(pki / "client.crt"),
                               "VIRTPLANE_ST_KEY": str(pki / "client.key")}, timeout=seconds + 300)
    out = proc.stdout + proc.stderr
    print(out)
    assert proc.returncode == 0, f"schemathesis found failures (exit {proc.returncode}):\n{out[-20000:]}"
    # A run that tested nothing would also exit 0.
    assert f"Tested: {operations}" in out, out[-5000:]
    assert re.search(r"\d+ generated, \d+ passed", out), out[-5000:]
