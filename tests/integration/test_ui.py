"""`cronstream ui` in a real headless Chromium (Debian's chromium + chromedriver, driven
by Selenium) on the real stack (issue 18): a scheduler, a worker and a sink running
example jobs in the test's namespace, the admission for a tenant's job, the stack's
Prometheus for the overview. Each page loads and shows the jobs and their runs; one
action of each kind works (pause an operator's job as the admin, trigger a tenant's
job as the tenant, replay a dead letter). Screenshots: .stack/screenshots/ui/."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from consumers.history import HistoryTables
from consumers.output import OutputTable
from producers.client import JobClient
from runtime.cassandra import cassandra_session
from runtime.kafka.clients import kafka_producer
from runtime.kafka.publisher import Publisher
from runtime.scrape import targets_dir, write_targets
from runtime.settings import REPO_ROOT, Settings
from runtime.tokens import ADMIN, token_path
from schemas.catalog import Topics
from schemas.definition import job_from_spec
from schemas.events import DeadLetter, Priority, RunOutcome, RunStatus, utc_now
from schemas.output import RunOutput
from tests.integration.helpers import CronstreamProcess, free_port, wait_http_up
from tests.integration.tenants import AdmissionThread

pytestmark = pytest.mark.integration
SHOTS = REPO_ROOT / ".stack" / "screenshots" / "ui"
JOBS = [
    {"id": "hello-python", "every": "1s", "target": "python",
     "callable": "examples.tasks:send_digest", "payload": '{"greeting": "hello"}'},
    {"id": "hopeless", "every": "2s", "target": "python", "callable": "examples.tasks:hopeless",
     "max_attempts": 1},
    {"id": "nightly-report", "cron": "0 2 * * *", "tz": "Europe/Paris", "target": "kafka",
     "topic": "reports.requests"},
]  # fmt: skip


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                 "--disable-dev-shm-usage"):  # fmt: skip
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


class Page:
    """The browser on one dashboard, with waits and screenshots."""

    def __init__(self, driver: webdriver.Chrome, url: str) -> None:
        self.driver, self.url = driver, url
        self.shots: list[Path] = []

    def open(self, path: str) -> None:
        self.driver.get(self.url + path)

    def text(self, css: str = "main") -> str:
        """The text of the element, waited for (a page the last click asked for may still
        be on its way)."""
        return str(self._wait(expected_conditions.presence_of_element_located(
            (By.CSS_SELECTOR, css))).text)  # fmt: skip

    def _wait(self, condition: Callable[[webdriver.Chrome], WebElement | bool]) -> WebElement:
        return WebDriverWait(self.driver, 30).until(condition)  # type: ignore[return-value]

    def until(self, path: str, check: Callable[[], bool], timeout: float = 60) -> None:
        """Load ``path`` again until ``check`` holds on it."""
        deadline = time.monotonic() + timeout
        while True:
            self.open(path)
            if check():
                return
            assert time.monotonic() < deadline, f"{path}:\n{self.text()}"
            time.sleep(1)

    def shot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        assert self.driver.save_screenshot(str(path))
        self.shots.append(path)

    def click(self, css: str, *, accept_alert: bool = False) -> None:
        """Click a link or a form's button and wait until the page it asks for replaced
        this one (a click returns before the browser has the next page: the failure of
        the CI run on a2be8d7 was a look for the flash on the page before it). The old
        page is marked with a script variable: chromedriver's staleness check of an
        element of it can fail with "Node ... does not belong to the document"."""
        self.driver.execute_script("window.cronstreamLeaving = true;")
        self.driver.find_element(By.CSS_SELECTOR, css).click()
        if accept_alert:
            WebDriverWait(self.driver, 30).until(expected_conditions.alert_is_present())
            self.driver.switch_to.alert.accept()
        self._wait(lambda driver: bool(driver.execute_script(
            "return window.cronstreamLeaving === undefined"
            " && document.readyState === 'complete';")))  # fmt: skip

    def sign_in(self, token: str) -> None:
        self.open("/ui/login")
        self.driver.find_element(By.ID, "token").send_keys(token)
        self.click("#sign-in")
        assert "signed in" in self.text("#flash")


@pytest.fixture
def scraped(history_ns: Settings) -> Iterator[Path]:
    """A file of the stack's Prometheus targets for the test's processes (removed after):
    the overview's figures are theirs."""
    path = targets_dir(history_ns) / f"test-ui-{history_ns.topic_prefix}.json"
    yield path
    path.unlink(missing_ok=True)


def _stack(settings: Settings, procs: list[CronstreamProcess], tmp_path: Path,
           scraped: Path) -> str:  # fmt: skip
    with JobClient(settings) as client:
        client.put_many([job_from_spec(spec, max_payload_bytes=settings.max_payload_bytes)
                         for spec in JOBS])  # fmt: skip
    ports = {}
    for role, args in (("scheduler", ()), ("sink", ()),
                       ("worker", ("--python-allow", "examples"))):  # fmt: skip
        ports[f"{settings.topic_prefix}-{role}"] = (role, port := free_port())
        procs.append(CronstreamProcess(settings, tmp_path, role, *args, "--metrics-port",
                                       str(port), command=role))  # fmt: skip
    write_targets(scraped.parent, scraped.stem, ports)
    port = free_port()
    ui = CronstreamProcess(settings, tmp_path, "ui", "--port", str(port), command="ui")
    procs.append(ui)
    url = f"http://127.0.0.1:{port}"
    wait_http_up(url, 60, ui.log, path="/readyz", alive=lambda: ui.proc.poll() is None)
    return url


def test_every_page_loads_shows_the_jobs_and_their_runs_and_one_action_each_works(
    history_ns: Settings, two: tuple[str, str], admission: AdmissionThread,
    procs: list[CronstreamProcess], browser: webdriver.Chrome, tmp_path: Path,
    capsys: pytest.CaptureFixture[str], scraped: Path,
) -> None:  # fmt: skip
    assert admission is not None  # tenants' commands are answered
    url = _stack(history_ns, procs, tmp_path, scraped)
    page = Page(browser, url)
    # A malformed run record: the worker dead-letters it, keeping its bytes (replayable).
    producer = kafka_producer(history_ns)
    producer.produce(Topics(history_ns).runs(Priority.NORMAL), value=b"\x00garbage", key=b"junk")
    producer.flush(30)
    page.open("/ui/jobs")  # no session: the sign-in page
    # The page the browser shows says why when it is not the sign-in page (CI once saw
    # /ui/jobs stay in the address bar: a browser error page, or the jobs page itself).
    shown = f"{page.driver.current_url}: {page.driver.title!r}\n{page.driver.page_source[:2000]}"
    assert page.driver.current_url == f"{url}/ui/login", shown
    assert "hello-python" not in page.text()
    page.sign_in(token_path(history_ns, ADMIN).read_text().strip())
    _overview(page, history_ns.topic_prefix)
    _read_pages(page, browser)
    _replay(page, browser)
    _pause(page)
    _tenant_trigger(page, browser, url, token_path(history_ns, two[0]).read_text().strip())
    with capsys.disabled():
        print("\nscreenshots:", *(str(p) for p in page.shots), sep="\n  ")


def _overview(page: Page, prefix: str) -> None:
    """Rendered, then updated live by its script (so the pages' CSP lets it run) with the
    stack's Prometheus's figures of the test's processes: each listed up, fires and runs
    per second above 0."""
    page.open("/ui")
    deadline = time.monotonic() + 90
    while not (page.text("#updated").startswith("live ·")
               and all(f"{prefix}-{role}" in page.text("#processes")
                       for role in ("scheduler", "worker", "sink"))
               and float(page.text("#fires")) > 0 and float(page.text("#runs")) > 0):  # fmt: skip
        assert time.monotonic() < deadline, page.text()
        time.sleep(1)
    assert "DOWN" not in "".join(line for line in page.text("#processes").splitlines()
                                 if prefix in line)  # fmt: skip
    assert int(page.text("#jobs")) >= len(JOBS)
    page.shot("overview")


def _read_pages(page: Page, browser: webdriver.Chrome) -> None:

    # Jobs: every job, then a search.
    page.open("/ui/jobs")
    listed = page.text("#jobs")
    assert all(spec["id"] in listed for spec in JOBS), listed
    page.open("/ui/jobs?q=hello")
    assert "hello-python" in page.text("#jobs")
    assert "hopeless" not in page.text("#jobs")
    page.shot("jobs")

    # A job: its definition, 10 next fires in its zone, its runs and their chart.
    page.until("/ui/jobs/hello-python", lambda: "SUCCEEDED" in page.text("#runs"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#fires tr")) == 11  # header + 10
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart rect.bar")
    assert "send_digest" in page.text("#definition")
    page.shot("job")
    page.open("/ui/jobs/nightly-report")
    assert "CET" in page.text("#fires") or "CEST" in page.text("#fires")
    page.until("/ui/jobs/hopeless", lambda: "FAILED" in page.text("#failures")
               or "DEAD_LETTERED" in page.text("#failures"))  # fmt: skip
    assert "hopeless" in page.text("#failures").lower()  # the error the task raised
    page.shot("job-failures")

    # Runs: by job, and by status.
    page.open("/ui/runs?job=hello-python&since=1h")
    assert "hello-python@" in page.text("#results")
    page.open("/ui/runs?status=failed,dead_lettered&since=1h")
    assert "hopeless@" in page.text("#results")
    page.shot("runs")


def _replay(page: Page, browser: webdriver.Chrome) -> None:
    """Dead letters, and a replay by the admin after the confirmation dialog (asked by
    static/confirm.js, so the CSP lets it run): the record is read again (and, still
    malformed, dead-lettered again: a second letter of the same source record)."""
    page.until("/ui/dlq", lambda: "undecodable run" in page.text("#letters"))
    page.shot("dlq")
    before = page.text("#letters").count("undecodable run")
    page.click("button.replay", accept_alert=True)
    assert "replayed" in page.text("#flash")
    page.until("/ui/dlq", lambda: page.text("#letters").count("undecodable run") > before)
    page.shot("dlq-replayed")


def _pause(page: Page) -> None:
    """Pause an operator's job as the admin, after the confirmation page."""
    page.open("/ui/jobs/hello-python")
    page.click("#act-pause")
    assert "Confirm: pause hello-python" in page.text("h1")
    page.shot("confirm")
    page.click("#confirm")
    assert "paused hello-python" in page.text("#flash")
    page.until("/ui/jobs/hello-python", lambda: "paused" in page.text("h1"))
    assert "none (paused)" in page.text("#fires")
    page.shot("job-paused")


def _tenant_trigger(page: Page, browser: webdriver.Chrome, url: str, token: str) -> None:
    """Trigger a tenant's job as that tenant (through the admission, as the API does);
    the operators' dead letters are not the tenant's, and replay is the admin's."""
    # a target the tenant may use without a grant (public http: schemas.policy)
    spec = {"cron": "0 3 * * *", "target": "http", "url": "https://hooks.example.com/digest"}
    put = httpx.put(f"{url}/v1/jobs/report", json=spec, timeout=60,
                    headers={"Authorization": f"Bearer {token}"})  # fmt: skip
    assert put.status_code == 200, put.text
    page.sign_in(token)
    page.until("/ui/jobs", lambda: "report" in page.text("#jobs"))
    assert "hello-python" not in page.text("#jobs")  # a tenant sees its own jobs only
    page.open("/ui/dlq")
    assert "undecodable run" not in page.text("#letters")
    assert not browser.find_elements(By.CSS_SELECTOR, "button.replay")
    page.open("/ui/jobs/report")
    page.click("#act-trigger")
    page.click("#confirm")
    assert "trigger: accepted" in page.text("#flash"), page.text()
    page.shot("tenant-triggered")


# -- the tenant boundary and the front door (issue 31) ------------------------------------
SPEC = {"cron": "0 3 * * *", "target": "http", "url": "https://example.com/report"}


def _ui(settings: Settings, procs: list[CronstreamProcess], tmp_path: Path) -> str:
    port = free_port()
    ui = CronstreamProcess(settings, tmp_path, "ui", "--port", str(port), command="ui")
    procs.append(ui)
    url = f"http://127.0.0.1:{port}"
    wait_http_up(url, 60, ui.log, path="/readyz", alive=lambda: ui.proc.poll() is None)
    return url


@contextmanager
def _signed_in(url: str, token: str) -> Iterator[httpx.Client]:
    """A browser-like client with a dashboard session (the cookie the sign-in set)."""
    with httpx.Client(base_url=url, timeout=60) as client:
        reply = client.post("/ui/login", data={"token": token})
        assert (reply.status_code, reply.headers["location"]) == (303, "/ui?done=signed+in")
        assert token not in reply.headers["set-cookie"]
        yield client


def _their_work(settings: Settings, tenants: tuple[str, str]) -> None:
    """Each tenant's failed runs in history and a dead letter of its job, as the sink
    and the worker write them."""
    now = utc_now()
    cluster, session = cassandra_session(settings, keyspace=settings.keyspace)
    try:
        tables = HistoryTables(session, settings.keyspace, ttl_s=3600)
        for t in tenants:
            outcome = RunOutcome(run_id=f"{t}/report@1", job_id=f"{t}/report", tenant=t,
                                 status=RunStatus.FAILED, scheduled_at=now - timedelta(minutes=1),
                                 recorded_at=now, error=f"run-error-of-{t}")  # fmt: skip
            for _table, statement in tables.rows(outcome):
                session.execute(statement)
    finally:
        cluster.shutdown()
    publisher = Publisher(settings)
    try:
        for t in tenants:
            publisher.publish(Topics(settings).dlq, DeadLetter(
                reason=f"letter-of-{t}", stage="worker", source_topic="runs",
                source_partition=-1, source_offset=-1, dead_at=now, job_id=f"{t}/report"))  # fmt: skip
        publisher.flush()
    finally:
        publisher.close()


def test_a_tenant_signed_in_sees_only_its_own_jobs_runs_and_dead_letters(
    history_ns: Settings, two: tuple[str, str], admission: AdmissionThread,
    procs: list[CronstreamProcess], tmp_path: Path,
) -> None:  # fmt: skip
    assert admission is not None
    a, b = two
    url = _ui(history_ns, procs, tmp_path)
    for t in two:
        put = httpx.put(f"{url}/v1/jobs/report", json=SPEC, timeout=60, headers={
            "Authorization": f"Bearer {token_path(history_ns, t).read_text().strip()}"})  # fmt: skip
        assert put.status_code == 200, put.text
    _their_work(history_ns, two)
    with _signed_in(url, token_path(history_ns, a).read_text().strip()) as ca:
        page = ca.get("/ui/jobs/report")  # a's own: its job, its run, its letter
        assert page.status_code == 200, page.text
        assert f"run-error-of-{a}" in page.text, page.text
        deadline = time.monotonic() + 60
        while f"letter-of-{a}" not in (letters := ca.get("/ui/dlq").text):
            assert time.monotonic() < deadline, letters
            time.sleep(1)
        assert f"letter-of-{b}" not in letters
    with _signed_in(url, token_path(history_ns, b).read_text().strip()) as cb:
        mine = cb.get("/ui/runs", params={"status": "failed", "since": "1h"}).text
        assert f"run-error-of-{b}" in mine
        assert f"run-error-of-{a}" not in mine
        for path in ("/ui/jobs/report", f"/ui/jobs/{a}/report"):
            other = cb.get(path)  # b's /ui/jobs/report is b's own job
            assert (other.status_code == 200) == (path == "/ui/jobs/report"), path
            assert f"run-error-of-{a}" not in other.text, path
        assert "no job" in cb.get(f"/ui/jobs/{a}/report").text
        for params in ({"job": f"{a}/report"}, {"run_id": f"{a}/report@1"}):
            assert f"run-error-of-{a}" not in cb.get("/ui/runs", params=params).text
        letters = cb.get("/ui/dlq").text
        assert f"letter-of-{b}" in letters
        assert f"letter-of-{a}" not in letters
        # Sign-out ends the session on the server: the old cookie opens nothing.
        old = cb.cookies["cronstream_session"]
        assert cb.post("/ui/logout").status_code == 303
        cb.cookies.clear()
        again = cb.get("/ui/jobs", headers={"cookie": f"cronstream_session={old}"})
        assert (again.status_code, again.headers["location"]) == (303, "/ui/login")


def test_a_runs_page_shows_what_each_attempt_printed(
    history_ns: Settings, procs: list[CronstreamProcess], browser: webdriver.Chrome,
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """docs/run-output.md: the run page (/ui/runs?run_id=) has a section per attempt with
    its output, as text (markup in it is shown, never run), and a note when its start
    was not kept."""
    now = utc_now()
    run_id = "backup@2026-11-27T02:00:00.000Z"
    printed = ["dumping 3 databases\n<script>alert(1)</script>\nerror: disk full\n",
               "dumping 3 databases\ndone: 3 dumps, 1.2 GB\n"]  # fmt: skip
    cluster, session = cassandra_session(history_ns, keyspace=history_ns.keyspace)
    try:
        tables = HistoryTables(session, history_ns.keyspace, ttl_s=3600)
        outputs = OutputTable(session, history_ns.keyspace, ttl_s=3600)
        for attempt, status in ((1, RunStatus.FAILED), (2, RunStatus.SUCCEEDED)):
            outcome = RunOutcome(run_id=run_id, job_id="backup", status=status, attempt=attempt,
                                 scheduled_at=now - timedelta(minutes=5), recorded_at=now,
                                 target_type="shell", duration_ms=1200)  # fmt: skip
            for _table, statement in tables.rows(outcome):
                session.execute(statement)
            session.execute(outputs.row(RunOutput(
                run_id=run_id, job_id="backup", attempt=attempt, status=status.value,
                scheduled_at=outcome.scheduled_at, recorded_at=now, output=printed[attempt - 1],
                dropped="start" if attempt == 1 else None, target_type="shell"))[1])  # fmt: skip
    finally:
        cluster.shutdown()
    page = Page(browser, _ui(history_ns, procs, tmp_path))
    page.sign_in(token_path(history_ns, ADMIN).read_text().strip())
    page.open(f"/ui/runs?run_id={run_id}")
    shown = page.text("#output")
    assert "attempt 1 · FAILED" in shown
    assert "its start was not kept" in shown
    assert "<script>alert(1)</script>\nerror: disk full" in shown  # shown as text, not run
    assert "attempt 2 · SUCCEEDED" in shown
    assert "done: 3 dumps, 1.2 GB" in shown
    assert len(browser.find_elements(By.CSS_SELECTOR, "#output pre.output")) == 2
    page.shot("run-output")
    with capsys.disabled():
        print("\nscreenshot:", page.shots[0])


def test_strangers_get_the_sign_in_page_a_foreign_host_400_and_a_big_body_413(
    ns: Settings, procs: list[CronstreamProcess], tmp_path: Path
) -> None:
    url = _ui(ns, procs, tmp_path)
    for path in ("/ui", "/ui/jobs", "/ui/jobs/x", "/ui/runs?status=failed", "/ui/dlq"):
        reply = httpx.get(url + path, timeout=30)
        assert (reply.status_code, reply.headers["location"]) == (303, "/ui/login"), path
    login = httpx.get(f"{url}/ui/login", timeout=30)
    assert 'id="sign-in"' in login.text
    for reply in (login, httpx.get(f"{url}/v1/jobs", timeout=30)):  # a page, an API 401
        assert "frame-ancestors 'none'" in reply.headers["content-security-policy"]
        assert reply.headers["x-frame-options"] == "DENY"
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["referrer-policy"] == "no-referrer"
    port = int(url.rsplit(":", 1)[1])
    assert httpx.get(f"http://localhost:{port}/healthz", timeout=30).status_code == 200
    rebound = httpx.get(f"{url}/ui/login", headers={"Host": f"evil.example:{port}"}, timeout=30)
    assert rebound.status_code == 400
    assert "Host" in rebound.json()["error"]
    ui = procs[-1].proc.pid
    _put_raw(port, chunked=False, megabytes=1)  # warm: the first request's allocations
    before = _rss_mib(ui)
    assert _put_raw(port, chunked=False, megabytes=60) == 413  # refused from the header
    assert _put_raw(port, chunked=True, megabytes=60) == 413  # cut off past 1 MiB
    grown = _rss_mib(ui) - before
    assert grown < 20, f"RSS grew {grown:.0f} MiB for two refused 60 MiB bodies"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


def _put_raw(port: int, *, chunked: bool, megabytes: int) -> int:
    """PUT a body of ``megabytes`` MiB without a token (chunked, or with its length), the
    answer read while it is sent (the server may answer and close long before the end);
    the status code."""
    head = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {megabytes << 20}"
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    answer: list[bytes] = []

    def read() -> None:
        try:
            answer.append(sock.recv(4096))
        except OSError as exc:  # reset before the answer came, or none in 30 s
            answer.append(repr(exc).encode())

    reader = threading.Thread(target=read)
    try:
        sock.sendall(f"PUT /v1/jobs/x HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}\r\n"
                     "Content-Type: application/json\r\n\r\n".encode())  # fmt: skip
        reader.start()
        chunk = b"x" * (1 << 20)
        for _ in range(megabytes):
            if answer:
                break
            sock.sendall(b"100000\r\n" + chunk + b"\r\n" if chunked else chunk)
        if chunked and not answer:
            sock.sendall(b"0\r\n\r\n")  # the end of the body
    except (BrokenPipeError, ConnectionResetError):
        pass  # answered and closed while the body was on its way
    finally:
        reader.join(30)
        sock.close()
    assert answer, "no answer"
    assert answer[0].startswith(b"HTTP/1.1 "), answer
    return int(answer[0].split()[1])
