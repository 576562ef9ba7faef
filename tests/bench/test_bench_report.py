"""The comparison report: ratios within rounds, goals judged on medians, every target on
a line of its own, and the JSON keeping every round."""

from __future__ import annotations

import json

from bench.report import (
    ORIGINAL,
    RAW_FLOOR,
    Comparison,
    Goal,
    Sample,
    render_comparisons,
    render_comparisons_markdown,
)

SYNC, INTERVAL = "ours sync", "ours interval"


def comparison() -> Comparison:
    """Three rounds in which ours and the original move together: the ratio within each
    round is 0.5, though the median rates (200 and 1,000) are 0.2 apart."""
    rates = [(100, 200, 50, 1_000), (200, 400, 100, 400), (500, 1_000, 250, 100)]
    result = Comparison(
        "publish 1 KB, 1 client",
        goals=[
            Goal(SYNC, "ratio", 0.5, ORIGINAL),
            Goal(INTERVAL, "ratio", 1.1, ORIGINAL),
            Goal(SYNC, "cpu", 0.45),
            Goal(SYNC, "rate", 10_000),
        ],
        targets=[SYNC, INTERVAL, RAW_FLOOR, ORIGINAL],
    )
    for sync, original, interval, floor in rates:
        result.rounds.append(
            {
                SYNC: Sample(sync, 0.0004),
                INTERVAL: Sample(interval, 0.0003),
                RAW_FLOOR: Sample(floor, 0.0002),
                ORIGINAL: Sample(original, 0.0005),
            }
        )
    return result


def test_ratios_are_taken_within_rounds() -> None:
    c = comparison()
    assert c.ratios(SYNC, ORIGINAL) == [0.5, 0.5, 0.5]
    assert c.ratios(INTERVAL, ORIGINAL) == [0.25, 0.25, 0.25]
    assert c.ratios(SYNC, RAW_FLOOR) == [0.1, 0.5, 5.0]


def test_goals_are_judged_on_the_median_and_say_so() -> None:
    c = comparison()
    ratio, missed, cpu, rate = c.goals
    assert ratio.met(c) is True  # 0.5 >= 0.5, within rounds
    assert missed.met(c) is False
    assert cpu.met(c) is True  # 0.4 ms <= 0.45
    assert rate.met(c) is False
    assert ratio.verdict(c) == "ours sync >= 0.5x original: met at 0.50x (0.50x-0.50x)"
    assert missed.verdict(c).startswith("ours interval >= 1.1x original: MISSED at 0.25x")
    assert cpu.verdict(c) == "ours sync CPU <= 0.45 ms/msg: met at 0.4 (0.4-0.4)"
    assert Goal(SYNC, "ratio", 1.0, "nobody").met(c) is None


def test_one_line_per_target_then_goals_then_the_tally() -> None:
    c = comparison()
    c.missing["Flask floor"] = "did not start: port in use"
    c.notes.append("original: single publish")
    text = render_comparisons([c])
    lines = text.splitlines()
    assert lines[0] == "publish 1 KB, 1 client"
    assert " ".join(lines[1].split()) == "target msg/s x original x raw floor CPU ms/msg"
    sync = next(line for line in lines if line.startswith("  ours sync"))
    assert "200 (100-500)" in sync and "0.50x (0.50x-0.50x)" in sync and "0.4 (0.4-0.4)" in sync
    original = next(line for line in lines if line.startswith("  original"))
    assert "400 (200-1,000)" in original
    assert "  Flask floor     not available: did not start: port in use" in lines
    assert "  - original: single publish" in lines
    assert "goals: 2 met, 2 MISSED, 0 not measured" in lines
    markdown = render_comparisons_markdown([c])
    assert "| ours sync | 200 (100-500) | 0.50x (0.50x-0.50x) |" in markdown
    assert "| Flask floor | not available: did not start: port in use |  |  |  |" in markdown
    assert "- goal: ours sync CPU <= 0.45 ms/msg: met at 0.4 (0.4-0.4)" in markdown


def test_a_target_that_stopped_keeps_its_rounds_and_says_why() -> None:
    c = comparison()
    c.missing[INTERVAL] = "server answered 415"
    lines = render_comparisons([c]).splitlines()
    assert any(line.startswith("  ours interval   100 (50-250)") for line in lines)
    assert "  - ours interval not available after 3 rounds: server answered 415" in lines


def test_the_json_keeps_every_round_ratio_and_goal() -> None:
    data = json.loads(json.dumps(comparison().to_json()))
    assert len(data["rounds"]) == 3 and data["rounds"][2][SYNC]["rate"] == 500
    assert data["summary"][SYNC]["ratio_to"][ORIGINAL] == {"median": 0.5, "min": 0.5, "max": 0.5}
    assert set(data["summary"][SYNC]["ratio_to"]) == {INTERVAL, RAW_FLOOR, ORIGINAL}
    assert [goal["met"] for goal in data["goals"]] == [True, False, True, False]
    assert data["goals"][2]["figures"]["median"] == 0.4
