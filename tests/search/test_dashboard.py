"""`nas-search dashboard`: a real server process over a real study, driven by headless
Chromium through its DevTools protocol while another process (or a real search) writes."""

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from nas.graph.serialize import graph_to_json
from nas.search import Study
from nas.zoo import cnn
from tests.search.conftest import ROOT, SEARCH_CONFIG, headless_browser

BROWSER = headless_browser()
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no headless browser (chromium) "
                                   "installed; .ci/run installs one")


def _env():
    return dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "nas.search.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=_env())


def _start(workdir, *args):
    """A dashboard process on a free port, and its URL once it listens."""
    proc = subprocess.Popen([sys.executable, "-m", "nas.search.cli", "dashboard",
                             f"--workdir={workdir}", "--port=0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())
    line = proc.stdout.readline()
    match = re.search(r"http://[\d.]+:(\d+)/", line)
    assert match, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, match.group(0), int(match.group(1))


def _stop(proc):
    proc.send_signal(2)  # Ctrl-C
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def _seeded_study(workdir):
    graph, constants, _ = cnn.CifarNet()
    study = Study.create(workdir, config={"train": {"input": {"image_size": 32}},
                                          "search": {"selection": {"costs": ["flops"]}}})
    seed = study.add(graph_to_json(graph, constants), generation=0)
    study.claim("w", seed)
    study.tell(seed, {"accuracy": 0.9, "flops": 7.5e7, "params": 2.2e6, "val_examples": 143})
    study.set_state("max_candidates", 3)
    return study, graph_to_json(graph, constants)


class Page:
    """One Chromium tab, driven over the DevTools protocol (a websocket, with aiohttp)."""

    def __init__(self, ws):
        self.ws, self.next_id = ws, 0

    async def send(self, method, **params):
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            msg = await self.ws.receive_json(timeout=240)
            if msg.get("id") == self.next_id:
                assert "error" not in msg, msg
                return msg["result"]

    async def value(self, expression):
        result = await self.send("Runtime.evaluate", expression=expression,
                                 returnByValue=True)
        return result["result"].get("value")

    async def wait_for(self, expression, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = await self.value(expression)
            if value:
                return value
            await asyncio.sleep(0.5)
        raise AssertionError(f"never true in {timeout} s: {expression}")


async def _browse(url, scenario):
    """Runs `scenario(page)` in a fresh headless Chromium pointed at `url`."""
    import aiohttp

    profile = tempfile.mkdtemp(prefix="nas-chromium-")
    browser = subprocess.Popen([BROWSER, "--headless", "--no-sandbox", "--disable-gpu",
                                "--remote-debugging-port=0", f"--user-data-dir={profile}",
                                "about:blank"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        for _ in range(600):
            if os.path.exists(port_file) and open(port_file).read().count("\n") >= 1:
                break
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/json/list") as r:
                target = next(t for t in await r.json() if t["type"] == "page")
            async with session.ws_connect(target["webSocketDebuggerUrl"],
                                          max_msg_size=0) as ws:
                page = Page(ws)
                await page.send("Page.navigate", url=url)
                await scenario(page)
    finally:
        browser.kill()
        browser.wait()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.mark.slow
def test_bad_workdir_port_and_busy_port_are_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = _cli("dashboard", f"--workdir={empty}")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "no study here" in proc.stderr
    _seeded_study(tmp_path / "s")
    proc = _cli("dashboard", f"--workdir={tmp_path / 's'}", "--port=70000")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _cli("dashboard", f"--workdir={tmp_path / 's'}", f"--port={port}")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"nas-search: error: --port={port}: cannot listen")


def _listening_address(port):
    """The local address of the LISTEN socket on `port`, from the kernel's table."""
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if int(hex_port, 16) == port and state == "0A":
                return socket.inet_ntoa(bytes.fromhex(address)[::-1])
    return None


def test_loopback_by_default_read_only_and_quiet_on_ctrl_c(tmp_path):
    study, _ = _seeded_study(tmp_path)
    before = (tmp_path / "study.db").read_bytes()
    proc, url, port = _start(tmp_path)
    try:
        assert _listening_address(port) == "127.0.0.1"
        import urllib.error
        import urllib.request

        overview = json.load(urllib.request.urlopen(url + "api/overview", timeout=30))
        assert overview["counts"]["done"] == 1 and overview["max_candidates"] == 3
        assert [r["id"] for r in overview["best"]] == [1]
        for method in ("POST", "PUT", "DELETE"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(urllib.request.Request(url + "api/overview",
                                                              method=method), timeout=30)
            assert e.value.code == 405
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "candidates/99", timeout=30)
        assert e.value.code == 404
        csv = urllib.request.urlopen(url + "report.csv", timeout=30).read().decode()
        assert csv.splitlines()[0].startswith("id,") and len(csv.splitlines()) == 2
    finally:
        code, out, err = _stop(proc)
    assert code == 130 and err == "", err
    assert (tmp_path / "study.db").read_bytes() == before  # nothing written


_WRITER = """
import sys
from nas.search import Study
study = Study.load(sys.argv[1])
kid = study.add(sys.argv[2], parent_id=1, generation=1)
study.claim("w", kid)
study.tell(kid, {"accuracy": 0.93, "flops": 4.0e7, "params": 2.0e6, "val_examples": 143})
"""


_FRONTS_PROBE = """(() => {
  const svg = document.querySelector('#front-plots svg.scatter');
  if (!svg) return {figures: [], points: [], ringed: [], texts: [], outside: []};
  const box = svg.getBoundingClientRect();
  const texts = [...svg.querySelectorAll('text')];
  return {
    figures: [...document.querySelectorAll('#front-plots figure')].map(f => f.dataset.cost),
    points: [...svg.querySelectorAll('circle.point')].map(c => c.dataset.id),
    ringed: [...svg.querySelectorAll('circle.point[stroke="#d62728"]')]
      .map(c => c.dataset.id),
    seed: (svg.querySelector('circle.point[data-mark="seed"]') || {dataset: {}}).dataset.id,
    star: (svg.querySelector('polygon.recommended') || {dataset: {}}).dataset.id || '',
    texts: texts.map(t => t.textContent),
    outside: texts.filter(t => { const r = t.getBoundingClientRect();
      return r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5
        || r.bottom > box.bottom + 0.5; }).map(t => t.textContent),
  };
})()"""


@needs_browser
def test_a_finishing_candidate_appears_without_a_reload(tmp_path):
    """Tables and the front picture update in place as a candidate finishes."""
    study, graph_json = _seeded_study(tmp_path)
    study.close()
    proc, url, _ = _start(tmp_path)

    async def scenario(page):
        await page.wait_for("document.querySelectorAll('#recent-table tbody tr').length == 1",
                            60)
        before = await page.value(_FRONTS_PROBE)
        assert before["figures"] == ["flops"] and before["points"] == ["1"], before
        assert before["seed"] == "1" and before["star"] == "", before
        assert "seed 1" in before["texts"] and not before["outside"], before
        await page.value("window.loadedOnce = true")
        subprocess.run([sys.executable, "-c", _WRITER, str(tmp_path), graph_json],
                       check=True, env=_env(), timeout=120)
        await page.wait_for("document.querySelector('#recent-table tbody tr[data-id=\"2\"]')"
                            " !== null", 60)
        await page.wait_for("document.querySelector('#front-plots circle.point"
                            "[data-id=\"2\"]') !== null", 60)
        after = await page.value(_FRONTS_PROBE)
        # the child, cheaper and more accurate, is on the front and recommended; the seed
        # (most FLOPs: at the right edge) keeps its label inside the picture
        assert after["points"] == ["2", "1"] and after["ringed"] == ["2"], after
        assert after["seed"] == "1" and after["star"] == "2", after
        assert {"seed 1", "recommended 2"} <= set(after["texts"]), after
        assert not after["outside"], after
        assert await page.value("window.loadedOnce === true")  # the same page: no reload
        assert "2 of 3 candidates finished" in await page.value(
            "document.getElementById('progress').textContent")
        best = await page.value("[...document.querySelectorAll('#best-table tbody tr')]"
                                ".map(r => r.dataset.id).join(',')")
        assert best == "2,1"
        await page.send("Page.navigate", url=url + "candidates/2")
        text = await page.wait_for("document.readyState == 'complete' && "
                                   "document.body.innerText", 60)
        assert "what the mutation changed" in text and "architecture" in text

    try:
        asyncio.run(_browse(url, scenario))
    finally:
        code, _, err = _stop(proc)
    assert code == 130 and err == "", err


@needs_browser
@pytest.mark.slow
def test_the_dashboard_follows_a_real_search(tmp_path):
    """A 3-candidate digits search runs beside the dashboard; the page shows its candidates
    as they finish."""
    search = subprocess.Popen(
        [sys.executable, "-m", "nas.search.cli", f"--config={SEARCH_CONFIG}",
         f"--workdir={tmp_path}", "--noprogress", "--config.search.max_candidates=3",
         "--config.train.total_epochs=0.5", "--config.search.seed_epochs=0.5",
         "--config.search.finals.k=0", "--config.search.seed_max_epochs=0",
         "--config.search.min_child_steps=0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())
    for _ in range(600):
        if (tmp_path / "study.db").exists():
            try:
                Study.load(tmp_path, read_only=True).close()
                break
            except ValueError:
                pass
        time.sleep(0.5)
    proc, url, _ = _start(tmp_path)

    async def scenario(page):
        await page.wait_for("document.getElementById('progress').textContent"
                            ".startsWith('0 of') || document.querySelectorAll("
                            "'#recent-table tbody tr').length >= 1", 600)
        seen = await page.value("document.querySelectorAll('#recent-table tbody tr').length")
        await page.value("window.loadedOnce = true")
        await page.wait_for(f"document.querySelectorAll('#recent-table tbody tr').length > "
                            f"{seen}", 900)
        assert await page.value("window.loadedOnce === true")

    try:
        asyncio.run(_browse(url, scenario))
    finally:
        _stop(proc)
        out = search.communicate(timeout=900)[0]
    assert search.returncode == 0, out[-2000:]
