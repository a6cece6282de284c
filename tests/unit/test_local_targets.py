"""python and shell targets: the worker's policies for them, against real imports and
real subprocesses."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import pytest

from cronstream.cli import main
from cronstream.consumers.errors import Cancelled, ExecutionFailed, TargetInvalid, TimedOut
from cronstream.consumers.executors.base import Output, RunContext
from cronstream.consumers.executors.python import PythonExecutor, PythonPolicy
from cronstream.consumers.executors.shell import OUTPUT_CAP, ShellExecutor, ShellPolicy
from cronstream.schemas.events import Target
from tests.unit.test_executors import context

HERE = "tests.unit.test_local_targets"
TESTS = PythonExecutor(PythonPolicy(["examples", "tests.unit"]))


def python(
    name: str, executor: PythonExecutor = TESTS, ctx: RunContext | None = None
) -> str | bytes | None:
    return executor.execute(Target(type="python", callable=name), ctx or context())


def shell_output(
    command: str, *allow: str, ctx: RunContext | None = None, env: tuple[str, ...] = ()
) -> Output | None:
    executor = ShellExecutor(ShellPolicy(allow, env=env))
    return executor.execute(Target(type="shell", command=command), ctx or context())


def shell(
    command: str, *allow: str, ctx: RunContext | None = None, env: tuple[str, ...] = ()
) -> str:
    """What the command printed (its output: "" for none)."""
    output = shell_output(command, *allow, ctx=ctx, env=env)
    if output is None:
        return ""
    assert isinstance(output.data, bytes)
    return output.data.decode()


# -- python ---------------------------------------------------------------------------
def test_python_calls_the_function_with_the_context() -> None:
    said = python("examples.tasks:send_digest", PythonExecutor())
    assert isinstance(said, str)
    assert "job@2026-11-22T10:00:00.000Z" in said


@pytest.mark.parametrize(
    "name",
    [
        "os:system",
        "subprocess:run",
        "json:loads",
        "sys:exit",
        "examples_evil:run",
        "tests.unit.test_local_targets:python",
    ],
)
def test_python_runs_only_allowlisted_modules_by_default(name: str) -> None:
    """Found by review: any module:function ran (os:system)."""
    with pytest.raises(TargetInvalid, match="not allowed on this worker"):
        python(name, PythonExecutor())


def test_python_refuses_before_importing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Importing a module runs its code: a module outside the allowlist is never imported."""
    marker = tmp_path / "imported"
    (tmp_path / "sideeffect_mod.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TargetInvalid, match="not allowed"):
        python("sideeffect_mod:f", PythonExecutor())
    assert not marker.exists()
    assert "sideeffect_mod" not in sys.modules


@pytest.mark.parametrize(
    "name",
    [
        "examples.tasks:_private",
        "examples.tasks:__init__",
        ".tasks:f",
        "examples.tasks",
        "examples..tasks:f",
        "",
    ],
)
def test_python_refuses_private_names_and_malformed_ones(name: str) -> None:
    with pytest.raises(TargetInvalid, match="not module:function"):
        python(name, PythonExecutor())


reexported = os.getcwd  # defined in posix, reachable through this allowed module


def test_python_refuses_a_callable_defined_outside_the_allowlist() -> None:
    """``from os import system`` in an allowed module does not make os.system a job."""
    with pytest.raises(TargetInvalid, match="outside the python allowlist"):
        python(f"{HERE}:reexported")


def test_python_exact_callable_entries_allow_that_callable_only() -> None:
    executor = PythonExecutor(PythonPolicy(["json:dumps"]))
    with pytest.raises(ExecutionFailed, match="raised TypeError"):
        python("json:dumps", executor)
    with pytest.raises(TargetInvalid, match="not allowed"):
        python("json:loads", executor)


@pytest.mark.parametrize("entry", ["os.", "a b", "x:y:z", "x:_y", ""])
def test_python_policy_refuses_unusable_entries(entry: str) -> None:
    with pytest.raises(ValueError, match="allowlist entry"):
        PythonPolicy([entry])


def test_python_target_that_cannot_be_imported_is_invalid() -> None:
    with pytest.raises(TargetInvalid, match="cannot import"):
        python("tests.unit.no_such_mod:f")


def raises_type_error(_context: RunContext) -> None:
    raise TypeError("bad")


def exits(_context: RunContext) -> None:
    sys.exit(3)


def test_python_exception_is_a_retriable_failure() -> None:
    with pytest.raises(ExecutionFailed, match="raised TypeError") as caught:
        python(f"{HERE}:raises_type_error")
    assert caught.value.retriable


def test_python_sys_exit_fails_the_run_not_the_worker() -> None:
    with pytest.raises(ExecutionFailed, match="raised SystemExit"):
        python(f"{HERE}:exits")


def _tracer(_frame: object, event: str, _arg: object) -> None:
    if event == "call":  # any Python function called after the job returned
        raise RuntimeError("a trace function left behind by a job")


def installs_a_tracer(_context: RunContext) -> str:
    """A job that leaves a trace function on its thread (found by review: the next run
    on that thread failed, and the worker re-raised the error and died)."""
    sys.settrace(_tracer)
    sys.setprofile(_tracer)
    return "done"


def interrupts(_context: RunContext) -> None:
    raise KeyboardInterrupt


def test_a_trace_function_a_job_installs_does_not_follow_it_to_the_next_run() -> None:
    results: list[object] = []

    def thread() -> None:  # a run thread: two attempts, one after the other
        results.append(python(f"{HERE}:installs_a_tracer"))
        results.append((sys.gettrace(), sys.getprofile()))
        results.append(python("examples.tasks:send_digest"))

    worker = threading.Thread(target=thread)
    worker.start()
    worker.join(10)
    assert results[:2] == ["done", (None, None)]
    assert "job@2026-11-22T10:00:00.000Z" in str(results[2])


def test_python_keyboard_interrupt_fails_the_run_not_the_worker() -> None:
    with pytest.raises(ExecutionFailed, match="raised KeyboardInterrupt"):
        python(f"{HERE}:interrupts")


# -- shell ----------------------------------------------------------------------------
def test_shell_is_off_unless_enabled() -> None:
    with pytest.raises(TargetInvalid, match="disabled"):
        shell("echo hi")


def test_shell_allowlist_matches_the_whole_argv() -> None:
    """Found by review: only argv[0] was checked, so allowing sh allowed sh -c anything."""
    with pytest.raises(TargetInvalid, match="matches no shell allowlist pattern"):
        shell("sh -c 'rm -rf /tmp/x'", "sh")
    with pytest.raises(TargetInvalid, match="matches no"):
        shell("sleep 1 2", "sleep *")
    with pytest.raises(TargetInvalid, match=r"'sleep \*\*' would allow any arguments"):
        shell("sleep 60", "sleep")  # the old meaning of a one-word entry
    with pytest.raises(TargetInvalid, match="matches no"):
        shell("echo a; rm x", "echo a")  # one argument 'a;' : no shell, no match
    assert "hello" in shell("echo hello", "echo *")
    assert "a b c" in shell("echo a b c", "echo **")
    assert shell("echo", "echo **") == "\n"
    assert '{"x": 1}' in shell("cat", "cat")
    with pytest.raises(ExecutionFailed, match="exit status 3"):
        shell("sh -c 'exit 3'", "sh -c 'exit [0-9]'")


def _jobs(tmp_path: Path) -> Path:
    """tmp/jobs/ok.sh, tmp/jobs/sub/deep.sh, tmp/evil.sh, tmp/jobs/link.sh -> ../evil.sh,
    tmp/alias -> jobs; every script prints its own name."""
    jobs = tmp_path / "jobs"
    (jobs / "sub").mkdir(parents=True)
    for script in (jobs / "ok.sh", jobs / "sub" / "deep.sh", tmp_path / "evil.sh"):
        script.write_text(f"#!/bin/sh\necho ran {script.name}\n")
        script.chmod(0o755)
    (jobs / "link.sh").symlink_to(tmp_path / "evil.sh")
    (tmp_path / "alias").symlink_to(jobs)
    return jobs


def test_shell_path_patterns_match_the_real_path_and_never_dotdot(tmp_path: Path) -> None:
    """Found by probing: the allowlist .../jobs/*.sh ran .../jobs/../../evil.sh."""
    jobs = _jobs(tmp_path)
    allow = f"{jobs}/*.sh"
    assert "ran ok.sh" in shell(f"{jobs}/ok.sh", allow)
    assert "ran ok.sh" in shell(f"{tmp_path}/alias/ok.sh", allow)  # a symlink to inside
    assert "ran ok.sh" in shell(f"{jobs}/ok.sh", f"{tmp_path}/alias/*.sh")  # the pattern's too
    for command in (
        f"{jobs}/../evil.sh",
        f"{jobs}/sub/../../evil.sh",
        f"{jobs}/..",
        f"cat {jobs}/../evil.sh",
        "cat --file=../evil.sh",
        "cat ../x",
        "cat ..",
        "cat a/../b",
    ):
        with pytest.raises(TargetInvalid, match=r"'\.\.' path segment"):
            shell(command, allow, "cat *", "cat -*", "cat **")
    with pytest.raises(TargetInvalid, match="matches no"):
        shell(f"{jobs}/link.sh", allow)  # a symlink to outside
    with pytest.raises(TargetInvalid, match="matches no"):
        shell(f"{jobs}/sub/deep.sh", allow)  # '*' stays in one directory
    assert "ran deep.sh" in shell(f"{jobs}/sub/deep.sh", f"{jobs}/*/*.sh")
    assert "ran ok.sh" in shell(f"sh {jobs}/ok.sh", f"sh {jobs}/*.sh")  # an argument too
    with pytest.raises(TargetInvalid, match="matches no"):
        shell(f"sh {jobs}/link.sh", f"sh {jobs}/*.sh")


def test_shell_options_must_be_spelled_out_by_the_pattern() -> None:
    """Found by probing: `date *` ran `date --file=SECRET`."""
    for command, allow in [
        ("date --file=/etc/shadow", "date *"),
        ("date -f /etc/shadow", "date **"),
        ("echo -e x", "echo **"),
        ("echo x -n", "echo x **"),
        ("echo -n x", "echo * *"),
        ("echo -", "echo *"),
    ]:
        with pytest.raises(TargetInvalid, match="an option matches only a pattern word"):
            shell(command, allow)
    assert shell("echo -n hi", "echo -n *") == "hi"
    assert shell("echo -n hi", "echo -* *") == "hi"
    assert shell("echo hi there", "echo **") == "hi there\n"
    with pytest.raises(TargetInvalid, match="matches no"):
        shell("echo -e hi", "echo -n *")


@pytest.mark.parametrize("pattern", ["", "a ** b", "'unclosed"])
def test_shell_policy_refuses_unusable_patterns(pattern: str) -> None:
    with pytest.raises(ValueError, match="shell allowlist pattern"):
        ShellPolicy([pattern])


def test_shell_environment_is_scrubbed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: a secret in the worker's environment showed up in a run's error."""
    monkeypatch.setenv("DB_PASSWORD", "hunter2")
    monkeypatch.setenv("SHARED_SETTING", "visible")
    out = shell("env", "env", env=("SHARED_SETTING",))
    assert "hunter2" not in out
    assert "DB_PASSWORD" not in out
    assert "SHARED_SETTING=visible" in out
    assert "CRONSTREAM_RUN_ID=job@2026-11-22T10:00:00.000Z" in out


def test_shell_unknown_command_is_an_invalid_target() -> None:
    with pytest.raises(TargetInvalid, match="cannot start 'no-such-command'"):
        shell("no-such-command x", "no-such-command *")


def test_shell_keeps_only_the_tail_of_a_huge_output() -> None:
    """Found by review: 300 MB of stdout cost +859 MB of worker memory."""
    out = shell_output("sh -c 'head -c 50000000 /dev/zero | tr \"\\\\0\" x; echo END'", "sh -c *")
    assert out is not None
    assert out.dropped == "start"
    assert out.data == b"x" * (OUTPUT_CAP - 4) + b"END\n"  # its last bytes: the output kept
    assert OUTPUT_CAP == 64 * 1024


def test_shell_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "child-survived"
    command = f"sh -c '(sleep 2; touch {marker}) & sleep 30'"
    started = time.monotonic()
    with pytest.raises(TimedOut):
        shell(command, "sh -c *", ctx=context(timeout=0.5))
    assert time.monotonic() - started < 5
    time.sleep(2.5)
    assert not marker.exists(), "a child of the timed-out command kept running"


def test_shell_kills_what_the_command_left_behind_even_in_another_session(tmp_path: Path) -> None:
    """Found by review: a setsid child survived its run."""
    marker = tmp_path / "escaped"
    command = f"sh -c 'setsid sh -c \"sleep 1.5; touch {marker}\" & echo started'"
    assert "started" in shell(command, "sh -c *")
    time.sleep(2.5)
    assert not marker.exists(), "a setsid child outlived its run"


def test_shell_timeout_kills_a_setsid_child_too(tmp_path: Path) -> None:
    marker = tmp_path / "escaped"
    command = f"sh -c 'setsid sh -c \"sleep 1.5; touch {marker}\" & sleep 30'"
    with pytest.raises(TimedOut):
        shell(command, "sh -c *", ctx=context(timeout=0.5))
    time.sleep(2.5)
    assert not marker.exists(), "a setsid child outlived its timed-out run"


def test_shell_cancel_stops_a_running_command() -> None:
    ctx = context(timeout=30)
    threading.Timer(0.3, ctx.cancelled.set).start()
    started = time.monotonic()
    with pytest.raises(Cancelled):
        shell("sleep 30", "sleep *", ctx=ctx)
    assert time.monotonic() - started < 5


def test_shell_command_that_ignores_its_stdin_still_succeeds() -> None:
    big = "x" * 1_000_000
    assert shell_output("true", "true", ctx=context(payload=big)) is None  # printed nothing


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--shell-allow", "'unclosed", "shell allowlist pattern"),
        ("--python-allow", "os.", "python allowlist entry"),
        ("--http-allow", "not-a-network", "does not appear to be"),
    ],
)
def test_worker_refuses_an_unusable_policy_before_starting(
    option: str, value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["worker", option, value]) == 2
    assert message in capsys.readouterr().err


# -- what a tenant is told ------------------------------------------------------------
def test_a_tenants_refused_python_run_is_not_shown_the_workers_allowlist() -> None:
    with pytest.raises(TargetInvalid) as tenant:
        python("os:system", ctx=context(tenant="acme"))
    assert str(tenant.value) == "'os:system' is not allowed on this worker"
    with pytest.raises(TargetInvalid, match=r"--python-allow: examples, tests\.unit"):
        python("os:system")  # an operators' job: where to look


def test_a_tenants_failed_import_is_told_the_kind_of_error_not_the_workers_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_mod.py").write_text("def run(:\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    executor = PythonExecutor(PythonPolicy(["broken_mod"]))
    with pytest.raises(TargetInvalid) as tenant:
        python("broken_mod:run", executor, ctx=context(tenant="acme"))
    assert str(tenant.value) == "cannot import 'broken_mod:run': SyntaxError"
    with pytest.raises(TargetInvalid, match=str(tmp_path)):
        python("broken_mod:run", executor)


def test_a_tenants_refused_shell_run_is_not_shown_the_workers_patterns() -> None:
    with pytest.raises(TargetInvalid) as tenant:
        shell("cat /etc/passwd", "/opt/jobs/*.sh", ctx=context(tenant="acme"))
    assert str(tenant.value) == "command 'cat /etc/passwd' is not allowed on this worker"
    assert "/opt/jobs" not in str(tenant.value)
    with pytest.raises(TargetInvalid, match="/opt/jobs"):
        shell("cat /etc/passwd", "/opt/jobs/*.sh")
    with pytest.raises(TargetInvalid) as disabled:
        shell("echo hi", ctx=context(tenant="acme"))
    assert str(disabled.value) == "shell targets are disabled on this worker"
