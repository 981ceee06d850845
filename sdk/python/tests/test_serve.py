"""serve() in a process of its own: SIGTERM drains the work in flight, then it exits 0."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from converge_provider import signed_headers

from .conftest import SECRET, ControlPlane, task

PROGRAM = """
import os, time
from converge_provider import FuncProvider, Options, Outcome, serve

def work(ctx, req):
    time.sleep(0.5)  # past the sync budget: answered 202, finished during the drain
    return Outcome(status={"slept": True})

serve([FuncProvider("vpc", 1, work)], secrets=[os.environ["SECRET"]], addr=os.environ["ADDR"],
      options=Options(sync_budget=0.05))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_sigterm_drains(control_plane: ControlPlane) -> None:
    port = free_port()
    env = dict(os.environ, SECRET=SECRET, ADDR=f"127.0.0.1:{port}", PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "serve never listened"
                time.sleep(0.05)
        body = json.dumps(task("t1", callback=control_plane.callback("t1"))).encode()
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        c.request("POST", "/", body=body, headers={"Content-Type": "application/json",
                                                  **signed_headers([SECRET], "m1", int(time.time()), body)})
        assert c.getresponse().status == 202
        c.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        (cb,) = control_plane.outcomes()  # delivered before the process exited
        assert cb.json()["outcome"] == {"status": {"slept": True}}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_https(tmp_path: Path) -> None:
    """certfile and keyfile serve HTTPS; the certificate is made with
    the openssl command, as a deployment would be given one."""
    import shutil
    import ssl
    import threading

    from converge_provider import FuncProvider, Outcome, Server

    openssl = shutil.which("openssl")
    assert openssl, "the openssl command is needed to make the test's certificate (apt-get install openssl)"
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    srv = Server([FuncProvider("vpc", 1, lambda c, r: Outcome(status={"tls": True}))], secrets=[SECRET],
                 addr="127.0.0.1:0", certfile=str(cert), keyfile=str(key))
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        ctx = ssl.create_default_context(cafile=str(cert))
        body = json.dumps(task("t1")).encode()
        c = http.client.HTTPSConnection(*srv.address, context=ctx, timeout=10)
        c.request("POST", "/", body=body, headers={"Content-Type": "application/json",
                                                  **signed_headers([SECRET], "m1", int(time.time()), body)})
        r = c.getresponse()
        assert r.status == 200 and json.loads(r.read())["outcome"] == {"status": {"tls": True}}
    finally:
        srv.stop()
        t.join(20)
