import pytest

from streams.core.cron import CronError, parse_cron


@pytest.mark.parametrize(
    ("expr", "croniter_form"),
    [
        ("*/5 * * * *", "*/5 * * * *"),
        ("0 0 12 * * MON-FRI", "0 12 * * MON-FRI 0"),  # 6 fields: seconds first
        ("30  2 * *   *", "30 2 * * *"),  # whitespace folded
        ("0 0 L * *", "0 0 L * *"),
        ("0 9 * * 1#2", "0 9 * * 1#2"),
        ("0 0 29 2 *", "0 0 29 2 *"),  # leap day only: still fires
        ("@hourly", "@hourly"),
    ],
)
def test_valid_expressions_normalise_to_croniter_order(expr: str, croniter_form: str) -> None:
    assert parse_cron(expr).croniter_form == croniter_form


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty"),
        ("* * *", "has 3 fields"),
        ("* * * * * * *", "has 7 fields"),
        ("61 * * * *", "not a valid cron expression"),
        ("*/0 * * * *", "not a valid cron expression"),
        ("a b c d e", "not a valid cron expression"),
        ("0 0 30 2 *", "never fires"),
    ],
)
def test_invalid_expressions_say_why(expr: str, message: str) -> None:
    with pytest.raises(CronError, match=message):
        parse_cron(expr)
