"""`cronstream ui` in a real headless Chromium (Debian's chromium + chromedriver, driven
by Selenium) on the real stack: a scheduler, a worker and a sink running
example jobs in the test's namespace, the admission for a tenant's job, the stack's
Prometheus for the overview. Each page loads and shows the jobs and their runs; one
action of each kind works (pause an operator's job as the admin, trigger a tenant's
job as the tenant, replay a dead letter). Screenshots: .stack/screenshots/ui/."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from cronstream.consumers.history import HistoryTables
from cronstream.consumers.output import OutputTable
from cronstream.producers.client import JobClient
from cronstream.runtime.cassandra import cassandra_session
from cronstream.runtime.kafka.clients import kafka_producer
from cronstream.runtime.scrape import targets_dir, write_targets
from cronstream.runtime.settings import REPO_ROOT, Settings
from cronstream.runtime.tokens import ADMIN, token_path
from cronstream.schemas.catalog import Topics
from cronstream.schemas.definition import job_from_spec
from cronstream.schemas.events import Priority, RunOutcome, RunStatus, utc_now
from cronstream.schemas.output import RunOutput
from tests.integration.helpers import CronstreamProcess, free_port, put_ui_job, ui_process
from tests.integration.tenants import AdmissionThread

pytestmark = pytest.mark.integration
SHOTS = REPO_ROOT / ".stack" / "screenshots" / "ui"
JOBS = [
    {
        "id": "hello-python",
        "every": "1s",
        "target": "python",
        "callable": "examples.tasks:send_digest",
        "payload": '{"greeting": "hello"}',
    },
    {
        "id": "hopeless",
        "every": "2s",
        "target": "python",
        "callable": "examples.tasks:hopeless",
        "max_attempts": 1,
    },
    {
        "id": "nightly-report",
        "cron": "0 2 * * *",
        "tz": "Europe/Paris",
        "target": "kafka",
        "topic": "reports.requests",
    },
]


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1400,1000",
        "--disable-dev-shm-usage",
    ):
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
        return str(
            self._wait(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css))).text
        )

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
        self._wait(
            lambda driver: bool(
                driver.execute_script(
                    "return window.cronstreamLeaving === undefined"
                    " && document.readyState === 'complete';"
                )
            )
        )

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


def scraped_roles(
    settings: Settings,
    procs: list[CronstreamProcess],
    tmp_path: Path,
    scraped: Path,
    worker_args: tuple[str, ...],
) -> None:
    """A scheduler, a sink and a worker (given ``worker_args``), each with a metrics port
    named in ``scraped`` for the stack's Prometheus."""
    ports = {}
    for role, args in (("scheduler", ()), ("sink", ()), ("worker", worker_args)):
        ports[f"{settings.topic_prefix}-{role}"] = (role, port := free_port())
        procs.append(
            CronstreamProcess(
                settings, tmp_path, role, *args, "--metrics-port", str(port), command=role
            )
        )
    write_targets(scraped.parent, scraped.stem, ports)


def _stack(
    settings: Settings, procs: list[CronstreamProcess], tmp_path: Path, scraped: Path
) -> str:
    with JobClient(settings) as client:
        client.put_many(
            [job_from_spec(spec, max_payload_bytes=settings.max_payload_bytes) for spec in JOBS]
        )
    scraped_roles(settings, procs, tmp_path, scraped, ("--python-allow", "examples"))
    return ui_process(settings, procs, tmp_path)


def test_every_page_loads_shows_the_jobs_and_their_runs_and_one_action_each_works(
    history_ns: Settings,
    two: tuple[str, str],
    admission: AdmissionThread,
    procs: list[CronstreamProcess],
    browser: webdriver.Chrome,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    scraped: Path,
) -> None:
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
    while not (
        page.text("#updated").startswith("live ·")
        and all(
            f"{prefix}-{role}" in page.text("#processes")
            for role in ("scheduler", "worker", "sink")
        )
        and float(page.text("#fires")) > 0
        and float(page.text("#runs")) > 0
    ):
        assert time.monotonic() < deadline, page.text()
        time.sleep(1)
    assert "DOWN" not in "".join(
        line for line in page.text("#processes").splitlines() if prefix in line
    )
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
    page.until(
        "/ui/jobs/hopeless",
        lambda: "FAILED" in page.text("#failures") or "DEAD_LETTERED" in page.text("#failures"),
    )
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
    put_ui_job(url, token, hook="https://hooks.example.com/digest")
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


# -- the tenant boundary and the front door -----------------------------------------------
def test_a_runs_page_shows_what_each_attempt_printed(  # long: one story
    history_ns: Settings,
    procs: list[CronstreamProcess],
    browser: webdriver.Chrome,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/run-output.md: the run page (/ui/runs?run_id=) has a section per attempt with
    its output, as text (markup in it is shown, never run), and a note when its start
    was not kept."""
    now = utc_now()
    run_id = "backup@2026-11-27T02:00:00.000Z"
    printed = [
        "dumping 3 databases\n<script>alert(1)</script>\nerror: disk full\n",
        "dumping 3 databases\ndone: 3 dumps, 1.2 GB\n",
    ]
    cluster, session = cassandra_session(history_ns, keyspace=history_ns.keyspace)
    try:
        tables = HistoryTables(session, history_ns.keyspace, ttl_s=3600)
        outputs = OutputTable(session, history_ns.keyspace, ttl_s=3600)
        for attempt, status in ((1, RunStatus.FAILED), (2, RunStatus.SUCCEEDED)):
            outcome = RunOutcome(
                run_id=run_id,
                job_id="backup",
                status=status,
                attempt=attempt,
                scheduled_at=now - timedelta(minutes=5),
                recorded_at=now,
                target_type="shell",
                duration_ms=1200,
            )
            for _table, statement in tables.rows(outcome):
                session.execute(statement)
            session.execute(
                outputs.row(
                    RunOutput(
                        run_id=run_id,
                        job_id="backup",
                        attempt=attempt,
                        status=status.value,
                        scheduled_at=outcome.scheduled_at,
                        recorded_at=now,
                        output=printed[attempt - 1],
                        dropped="start" if attempt == 1 else None,
                        target_type="shell",
                    )
                )[1]
            )
    finally:
        cluster.shutdown()
    page = Page(browser, ui_process(history_ns, procs, tmp_path))
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
