"""`kata interview`'s verbs as the terminal shows them: cli.py parses the command line and calls
one function here, which prints and returns the exit code.

Exit codes: 0 done (a save whose items all pass, a report written); 1 a save with items that do
not pass, or a save refused (time up, the session ended); 2 a usage error (no session, another
session holds the workspace, an unknown snapshot, a file that cannot be written); 4 the grader
broke. Every line that quotes the candidate (an item's message, a diff, an answer) is printable
(graders.shared.untrusted).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

from graders.interview import record, review, session as verbs
from graders.interview.questions import STAGE_PROMPTS
from graders.shared import tracks
from graders.shared.untrusted import file_name, quote

USAGE_ERROR = 2
IMPORT_TIMEOUT = 60.0  # graders.judge.grade.DEFAULT_IMPORT_TIMEOUT (not imported: it loads torch)


def start(console: Console, workspace: Path, minutes: float, strict: bool, track: str) -> int:
    """`kata interview start DIR`: start or resume, then show the current stage."""
    try:
        session, made, resumed = verbs.start(workspace, minutes=minutes, strict=strict,
                                             track=track)
    except (OSError, record.SessionBusy, ValueError) as exc:
        return _error(console, exc)
    for path in made:
        console.print(Text(f"created {file_name(path)}"))
    console.print(Text("resumed the session" if resumed else "started the session", style="bold")
                  + Text(f" in {file_name(workspace)}"))
    show_stage(console, session, session["stage"])
    console.print(status(session, time.time()))
    return 0


def save(console: Console, workspace: Path, workers=None, ticking: bool = False) -> int:
    """`kata interview save DIR`: snapshot, grade, record; the verdict and the status line (left
    to the interactive verb's own when it keeps one `ticking`). Without `workers`, they are
    started first: their torch imports overlap this process's own."""
    try:
        saved = verbs.save(workspace, workers=workers or _take([_workers(workspace)]))
    except verbs.Refused as exc:
        console.print(Text(str(exc), style="bold red"))
        return 1
    except (verbs.NoSession, record.SessionBusy, ValueError, OSError) as exc:
        return _error(console, exc)
    if saved.event is None:
        console.print(Text("no change since the last snapshot: nothing graded", style="dim"))
    else:
        show_verdict(console, saved)
        if saved.opened:
            show_stage(console, saved.record, saved.opened)
    if not ticking:
        console.print(status(saved.record, time.time()))
    return 0 if saved.event is None else saved.result.exit_code()


def end(console: Console, workspace: Path) -> int:
    """`kata interview end DIR`: the final hidden grade (once), then the session's report."""
    try:
        session = verbs.end(workspace)
    except (verbs.NoSession, record.SessionBusy, ValueError, OSError) as exc:
        return _error(console, exc)
    for line in review.lines(session, workspace):
        console.print(Text(line), soft_wrap=True)
    return 0


def report(console: Console, workspace: Path, markdown: Path | None, json_path: Path | None,
           plot: Path | None) -> int:
    """`kata interview report DIR`: the report in the terminal, and the files asked for."""
    from graders.shared.output_files import OutputError, write_atomically

    try:
        session = verbs.load(workspace)
    except (verbs.NoSession, ValueError) as exc:
        return _error(console, exc)
    for line in review.lines(session, workspace):
        console.print(Text(line), soft_wrap=True)
    try:
        if markdown is not None:
            write_atomically(markdown, review.markdown(session, workspace))
            console.print(Text(f"wrote {file_name(markdown)}"))
        if json_path is not None:
            write_atomically(json_path, json.dumps(review.to_json(session, workspace),
                                                   indent=2) + "\n")
            console.print(Text(f"wrote {file_name(json_path)}"))
        if plot is not None:
            review.save_png(session, plot)
            console.print(Text(f"wrote {file_name(plot)}"))
    except ImportError:
        console.print(Text("matplotlib is not installed (pip install 'kvkata[bench]'): the "
                           "text strip above is the plot", style="yellow"))
    except (OSError, OutputError) as exc:
        return _error(console, exc)
    return 0


def replay(console: Console, workspace: Path, step: int | None) -> int:
    """`kata interview replay DIR [--step N]`: each snapshot's diff, grade and time."""
    try:
        lines = review.replay_lines(verbs.load(workspace), workspace, step)
    except (verbs.NoSession, ValueError) as exc:
        return _error(console, exc)
    for line in lines or ["no snapshot yet: nothing to replay"]:
        console.print(Text(line), soft_wrap=True)
    return 0


def interactive(console: Console, workspace: Path, minutes: float, strict: bool,
                track: str) -> int:
    """`kata interview [DIR]`: start or resume, show the stage, grade every save of the files
    until time up or Ctrl-C, then end. The whole session holds the workspace's lock."""
    from graders.workflows.watch import watch

    try:
        with record.locked(workspace):
            code = start(console, workspace, minutes, strict, track)
            session = verbs.load(workspace) if code == 0 else None
            if session is None or session["ended"] is not None:
                return code if session is None else end(console, workspace)
            chosen = tracks.get(session["track"])
            paths = [p for p in verbs.files(workspace, chosen) if p]
            console.print(Text(f"watching {', '.join(p.name for p in paths)}: save to be graded "
                               "(Ctrl-C ends the session)", style="dim"))
            ahead, shown = [], [0.0]

            def graded() -> None:
                _clear_status(console)
                save(console, workspace, _take(ahead), ticking=console.is_terminal)
                ahead.append(_workers(workspace))

            def time_up() -> bool:
                """Asked once a poll: whether time is up; in a terminal, the status line kept
                ticking, rewritten in place once a second."""
                now, current = time.time(), verbs.load(workspace)
                if console.is_terminal and now - shown[0] >= 1:
                    shown[0] = now
                    console.file.write(f"\r{status(current, now).plain}\x1b[K")
                    console.file.flush()
                return verbs.time_left(current, now) <= 0

            try:
                watch(paths, graded, stop=time_up)
            finally:
                _clear_status(console)
                for workers in ahead:
                    workers.close()
            console.print(Text("\nthe session ends: the final grade, with the hidden cases",
                               style="bold"))
            return end(console, workspace)
    except (record.SessionBusy, OSError) as exc:
        return _error(console, exc)


def show_stage(console: Console, session: dict, stage: str) -> None:
    """Stage `stage`: the interviewer's prompt, the items it adds, its conceptual questions."""
    from graders.interview.questions import QUESTIONS

    track = tracks.get(session["track"])
    console.rule(f"stage {stage}", align="left")
    console.print(Text(" ".join(STAGE_PROMPTS[stage].split())))  # a paragraph, wrapped here
    console.print(Text("\nItems this stage adds:", style="bold"))
    for item in verbs.added_items(track, stage):
        console.print(Text(f"  {item.id}: {item.title}"))
    questions = verbs.questions(stage) if track.levels else []
    if questions:
        console.print(Text("\nQuestions (answer each under its heading in answers.md):",
                           style="bold"))
        for item in questions:
            console.print(Text(f"  {item.id}: {QUESTIONS[item.id]}"))


def show_verdict(console: Console, saved: verbs.Saved) -> None:
    """A save's verdict: its snapshot, level and score, then each item that does not pass with
    the first line of its message (printable)."""
    from graders.formats.report import STATUS_STYLE

    event = saved.event
    console.rule(f"{event['snapshot']} at {review.clock(event['t'])}", align="left", style="dim")
    for item in saved.result.items:
        if item.status != "pass":
            label, style = STATUS_STYLE[item.status]
            first = (quote(item.full_message).splitlines() or [""])[0]
            console.print(Text.assemble((f"  {label:<8}", style), f"{item.id}: {first}"),
                          overflow="fold")
    console.print(Text(f"{event['level']}, {event['score']:g} points, "
                       f"{len(event['passing'])} of {len(saved.result.items)} items pass",
                       style="bold green" if saved.result.passed else "bold"))
    if saved.opened:
        console.print(Text(f"Stage {event['level']} is complete: stage {saved.opened} opens.",
                           style="bold green"))


def status(session: dict, now: float) -> Text:
    """The status line: the time left, the stage and the level of the last save."""
    left = verbs.time_left(session, now)
    saves = review.saves(session)
    level = saves[-1]["level"] if saves else "not graded yet"
    return Text(f"[{review.clock(left)} left | stage {session['stage']} | level {level} | "
                f"{len(saves)} saves]", style="cyan")


def _clear_status(console: Console) -> None:
    """In a terminal, erase the ticking status line, so that what follows starts a clean line."""
    if console.is_terminal:
        console.file.write("\r\x1b[K")
        console.file.flush()


def _workers(workspace: Path):
    """Workers for the next save, started now so that their torch import is done by the time
    the candidate saves (as `kata grade --watch` does); None when they cannot be started."""
    from graders.judge.workers import GradeWorkers

    try:
        session = verbs.load(workspace)
    except (verbs.NoSession, ValueError):  # the save says so
        return None
    track = tracks.get(session["track"])
    implementation, tests = verbs.files(workspace, track)
    runs_tests = track.runs_tests(set(verbs.stage_items(track, session["stage"])))
    try:
        return GradeWorkers.start(implementation, tests if runs_tests and tests.is_file()
                                  else None, track.module, verbs.default_sandbox(),
                                  IMPORT_TIMEOUT, ahead=True)
    except Exception:  # the save starts its own, and says why if it cannot either
        return None


def _take(ahead: list):
    """The workers started ahead, let go on the files as they are now; None when there are none
    or they died while waiting."""
    workers = ahead.pop() if ahead else None
    return workers if workers is not None and workers.go() else None


def _error(console: Console, exc: Exception) -> int:
    message = getattr(exc, "strerror", None) and f"{exc.strerror} ({exc.filename})" or str(exc)
    console.print(Text(f"kata: error: {message}"), soft_wrap=True)
    return USAGE_ERROR
