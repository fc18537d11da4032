"""Fixtures: a real `rota standalone` process and a fresh pull job per test."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from rota_client import Client

TOKEN = "test-token"
HERE = Path(__file__).resolve().parent
DEFAULT_BIN = (HERE.parent / ".." / ".." / "target" / "debug" / "rota").resolve()


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    stderr_path: Path

    def http(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10.0
        )


def _rota_bin() -> Path:
    configured = os.environ.get("ROTA_BIN")
    path = Path(configured).resolve() if configured else DEFAULT_BIN
    if not (path.is_file() and os.access(path, os.X_OK)):
        message = f"rota binary not found or not executable: {path} (set ROTA_BIN)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    binary = _rota_bin()
    data_dir = tmp_path_factory.mktemp("rota-data")
    stderr_path = data_dir.parent / "rota-stderr.log"
    env = dict(os.environ, ROTA_API_TOKEN=TOKEN)
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            [str(binary), "standalone", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
    assert process.stdout is not None
    stdout = process.stdout
    first_line: list[bytes] = []
    got_line = threading.Event()

    def read_stdout() -> None:
        # The first line names the URL; the rest is drained so the pipe never fills.
        for line in stdout:
            if not got_line.is_set():
                first_line.append(line)
                got_line.set()
        got_line.set()

    threading.Thread(target=read_stdout, name="rota-stdout", daemon=True).start()
    try:
        if not got_line.wait(30) or not first_line:
            pytest.fail(
                f"rota standalone printed no URL (exit {process.poll()}):\n"
                + stderr_path.read_text(errors="replace")[-4000:]
            )
        match = re.search(rb"http://127\.0\.0\.1:\d+", first_line[0])
        assert match, f"no URL in the first stdout line: {first_line[0]!r}"
        url = match.group(0).decode()
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or process.poll() is not None:
                pytest.fail(
                    f"rota standalone at {url} never became healthy:\n"
                    + stderr_path.read_text(errors="replace")[-4000:]
                )
            time.sleep(0.05)
        server = Server(url=url, process=process, stderr_path=stderr_path)
        with server.http() as http:
            # The brief's job, checked once: a pull job with 2 attempts.
            answer = http.post("/api/v1/jobs", json=_job_body("orders"))
            assert answer.status_code == 201, answer.text
        yield server
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(15)


def _job_body(name: str) -> dict[str, object]:
    return {
        "name": name,
        "app": "shop",
        "schedule": {"kind": "none"},
        "delivery": {"kind": "pull"},
        "max_attempts": 2,
    }


_job_numbers = itertools.count(1)


@pytest.fixture
def job(server: Server) -> str:
    """A fresh pull job (`orders-N`, like `orders`) so that tests never pull each
    other's tasks."""
    name = f"orders-{next(_job_numbers)}"
    with server.http() as http:
        answer = http.post("/api/v1/jobs", json=_job_body(name))
    assert answer.status_code == 201, answer.text
    return name


@pytest.fixture
def client(server: Server) -> Iterator[Client]:
    with Client(server.url, TOKEN, timeout=10.0) as c:
        yield c
