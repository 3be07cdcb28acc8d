"""README opens with exactly the two set-up commands, and CI runs the second one."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def first_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[0] == "```"
    end = lines.index("```", 1)
    return lines[1:end]


def test_readme_starts_with_two_commands():
    cmds = first_commands()
    assert len(cmds) == 2
    assert "planner " in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text()
    test_cmd = first_commands()[1]
    assert "README.md" in ci
    # .ci/run greps the README for the line that starts like this and runs it
    assert test_cmd.startswith('python3 -m venv .venv && .venv/bin/pip install -q -e ".[test]"')
