"""Reading cron expressions: what the dialect accepts, how it spells things, and the
message a refused expression gets."""

from __future__ import annotations

import re

import pytest

from cronstream.schemas.definition.cron import parse_cron
from cronstream.schemas.errors import CronError


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        ("*/5 * * * *", "*/5 * * * *"),
        ("0 0 12 * * MON-FRI", "0 0 12 * * MON-FRI"),  # 6 fields: seconds first
        ("30  2 * *   *", "30 2 * * *"),  # whitespace folded
        ("0 0 L * *", "0 0 L * *"),
        ("0 9 * * 1#2", "0 9 * * 1#2"),
        ("0 0 29 2 *", "0 0 29 2 *"),  # leap day only: still fires
        ("@hourly", "@hourly"),
    ],
)
def test_valid_expressions_keep_their_text_with_whitespace_folded(expr: str, text: str) -> None:
    assert parse_cron(expr).text == text


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("0 0 * * 5L", "0 0 * * L5"),  # last Friday, both spellings
        ("0 0 * * FRIL", "0 0 * * 5L"),
        ("0 0 * * 7", "0 0 * * 0"),  # Sunday is 0 and 7
        ("0 0 * * sun", "0 0 * * 0"),  # names in any case
        ("0 0 1 jan *", "@yearly"),
        ("0 0 ? * MON", "0 0 * * MON"),  # ? is * in a day field
        ("0 0 1-31/10 * *", "0 0 1,11,21,31 * *"),
        ("0 0 10/10 * *", "0 0 10,20,30 * *"),  # A/S runs to the field's end
        ("0 0 * * 5-7", "0 0 * * 0,5,6"),
    ],
)
def test_spellings_of_the_same_schedule_read_the_same(a: str, b: str) -> None:
    x, y = parse_cron(a), parse_cron(b)
    assert (x.seconds, x.minutes, x.hours, x.months) == (y.seconds, y.minutes, y.hours, y.months)
    assert (
        x.day.days,
        x.day.last_day,
        x.day.weekdays,
        x.day.last_weekdays,
        x.day.nth_weekdays,
    ) == (
        y.day.days,
        y.day.last_day,
        y.day.weekdays,
        y.day.last_weekdays,
        y.day.nth_weekdays,
    )


@pytest.mark.parametrize(
    ("expr", "either"),
    [
        ("0 0 1,15 * MON", True),  # both restricted: a day matching either fires
        ("0 0 */2 * MON", False),  # a day field beginning with * is unrestricted
        ("0 0 ? * MON", False),
        ("0 0 1 * *", False),
        ("0 12 8-14 * 2#2", True),  # '#' follows the same rule as other weekdays
    ],
)
def test_the_day_fields_combine_by_the_vixie_rule(expr: str, either: bool) -> None:
    assert parse_cron(expr).day.either is either


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("", "empty"),
        ("* * *", "has 3 fields"),
        ("* * * * * * *", "has 7 fields"),
        ("61 * * * *", "minute 61 is outside 0-59"),
        ("*/0 * * * *", "minute step '0' must be a whole number >= 1"),
        ("a b c d e", "is not a number"),
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("0 0 15W * *", "W (nearest weekday) is not supported"),
        ("0 0 * * L", "write 5L"),
        ("0 0 * * 1#6", "the n of DAY#n is 1-5"),
        ("0 5-1 * * *", "runs backwards"),
        ("? * * * *", "minute '?' is not a number"),
        ("@reboot", "unknown alias"),
        ("0 0 * 13 *", "month 13 is outside 1-12"),
        ("\u0665 * * * *", "is not a number"),  # digits are ASCII digits
        ("0 0 ?/2 * *", "day of month '?' is not a number"),  # ? stands alone
    ],
)
def test_invalid_expressions_say_why(expr: str, message: str) -> None:
    with pytest.raises(CronError, match=re.escape(message)):
        parse_cron(expr)
