"""`kata interview`'s verbs as the terminal shows them: cli.py parses the command line and calls
one function here, which prints and returns the exit code.

Exit codes: 0 done (a save whose items all pass, a report written); 1 a save with items that do
not pass, or a save refused (time up, the session ended); 2 a usage error (no session, another
session holds the workspace, an unknown snapshot, a file that cannot be written, a record that
fails its schema, --verify without the sandbox it needs); 4 the grader broke; 130 the final grade
interrupted by Ctrl-C (the session ended with the items it graded). Every line that quotes the
candidate or the record (an item's message, a diff, an answer, a field, a path, an error) is
printable (graders.shared.untrusted).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from rich.console import Console
from rich.text import Text

from graders.interview import record, review, session as verbs
from graders.interview.questions import STAGE_PROMPTS
from graders.interview.warm import NextWorkers, OwnTestsVerdict
from graders.shared import tracks
from graders.shared.untrusted import file_name, printable, quote

USAGE_ERROR = 2
POLL_SECONDS = 0.05  # of the watch: a save is seen 0.05-0.1 s after it lands
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
# Seconds left: the warning then, for sessions longer than that.
WARNINGS = {
    600: "Under 10 minutes left: finish the stage you are on, and answer its questions "
    "in answers.md.",
    120: "Under 2 minutes left: save what you want graded; at time up the last save is "
    "graded with the hidden cases.",
}


def start(
    console: Console, workspace: Path, minutes: float, strict: bool, track: tracks.Track
) -> int:
    """`kata interview start DIR`: start or resume, then show the current stage."""
    try:
        session, made, resumed = verbs.start(workspace, minutes=minutes, strict=strict, track=track)
    except (OSError, record.SessionBusy, ValueError) as exc:
        return _error(console, exc)
    for path in made:
        console.print(Text(f"created {file_name(path)}"))
    console.print(
        Text("resumed the session" if resumed else "started the session", style="bold")
        + Text(f" in {file_name(workspace)}")
    )
    show_stage(console, session, session["stage"])
    console.print(status(session, time.time()))
    return 0


def save(
    console: Console,
    workspace: Path,
    workers=None,
    ticking: bool = False,
    own_tests: OwnTestsVerdict | None = None,
) -> int:
    """`kata interview save DIR`: snapshot, grade, record; the verdict and the status line (left
    to the interactive verb's own when it keeps one `ticking`). Without `workers`, they are
    started first: their torch imports overlap this process's own. `own_tests`: the verdict the
    interactive verb keeps across saves (verbs.save)."""
    if workers is None:
        now = NextWorkers(workspace)
        now.start()
        workers = now.take(with_tests=True)
    try:
        saved = verbs.save(workspace, workers=workers, own_tests=own_tests)
    except verbs.Interrupted as exc:  # time was up, and the final grade interrupted
        return _interrupted(console, exc, workspace)
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
    except verbs.Interrupted as exc:
        return _interrupted(console, exc, workspace)
    except (verbs.NoSession, record.SessionBusy, ValueError, OSError) as exc:
        return _error(console, exc)
    _print_review(console, review.lines(session, workspace))
    return 0


def _print_review(console: Console, lines: list[str]) -> None:
    """The session's report, each line wrapped at the terminal's width (at spaces)."""
    for line in lines:
        console.print(Text(line, overflow="fold"))


def _interrupted(console: Console, exc: "verbs.Interrupted", workspace: Path) -> int:
    """The final grade was interrupted (Ctrl-C): the session has ended with the items it graded
    (recorded); say so, show the report, and exit as a command ended by Ctrl-C does. Further
    Ctrl-Cs are ignored (verbs.end): nothing is left to interrupt."""
    console.print(Text(f"\n{exc}", style="bold yellow"))
    _print_review(console, review.lines(exc.record, workspace))
    return INTERRUPTED


def report(
    console: Console,
    workspace: Path,
    markdown: Path | None,
    json_path: Path | None,
    plot: Path | None,
    html: Path | None = None,
    sandbox=None,
) -> int:
    """`kata interview report DIR`: the report in the terminal, and the files asked for (`html`:
    the page of graders.interview.page). With `sandbox` (`--verify`), every snapshot is graded
    again in it first and each claim checked (graders.interview.verify); without, the record is
    shown as written, its snapshots checked against their names."""
    from graders.shared.output_files import OutputError, write_atomically

    try:
        session = verbs.load(workspace)
        checked = _checked(console, session, workspace, sandbox)
    except (verbs.NoSession, ValueError, OSError) as exc:
        return _error(console, exc)
    _print_review(console, review.lines(session, workspace, checked))
    try:
        if markdown is not None:
            write_atomically(markdown, review.markdown(session, workspace, checked))
            console.print(Text(f"wrote {file_name(markdown)}"), soft_wrap=True)
        if json_path is not None:
            write_atomically(
                json_path, json.dumps(review.to_json(session, workspace, checked), indent=2) + "\n"
            )
            console.print(Text(f"wrote {file_name(json_path)}"), soft_wrap=True)
        if html is not None:
            from graders.interview import page

            page.write_html(session, workspace, html, checked)
            console.print(Text(f"wrote {file_name(html)}"), soft_wrap=True)
        if plot is not None:
            review.save_png(session, plot)
            console.print(Text(f"wrote {file_name(plot)}"), soft_wrap=True)
    except ImportError:
        console.print(
            Text(
                "matplotlib is not installed (pip install 'kvkata[bench]'): the "
                "text strip above is the plot",
                style="yellow",
            )
        )
    except (OSError, OutputError, ValueError) as exc:
        return _error(console, exc)
    return 0


def replay(console: Console, workspace: Path, step: int | None, sandbox=None) -> int:
    """`kata interview replay DIR [--step N] [--verify]`: each snapshot's diff, grade and time,
    and what was checked of it (as `report`)."""
    try:
        session = verbs.load(workspace)
        review.replay(session, workspace, step)  # an unknown --step before any grade
        checked = _checked(console, session, workspace, sandbox)
        lines = review.replay_lines(session, workspace, step, checked)
    except (verbs.NoSession, ValueError, OSError) as exc:
        return _error(console, exc)
    for line in lines or ["no snapshot yet: nothing to replay"]:
        console.print(Text(line), soft_wrap=True)
    return 0


def _checked(console: Console, session: dict, workspace: Path, sandbox):
    """What report and replay check of the record: with `sandbox` (--verify), every claim
    (verify.verify; SandboxUnavailable, a ValueError here, when it cannot be had), else the
    snapshots' names."""
    from graders.interview import verify
    from graders.judge.isolation import SandboxUnavailable

    if sandbox is None:
        return verify.unverified(session, workspace)
    try:
        sandbox.resolve()  # refused before anything is said or run
        count = len(review.saves(session)) + (session["final"] is not None)
        console.print(
            Text(f"--verify: grading {count} snapshot(s) again ...", style="dim"), soft_wrap=True
        )
        return verify.verify(session, workspace, sandbox)
    except SandboxUnavailable as exc:
        raise ValueError(str(exc)) from None


def interactive(
    console: Console, workspace: Path, minutes: float, strict: bool, track: tracks.Track
) -> int:
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
            console.print(
                Text(
                    f"watching {', '.join(p.name for p in paths)}: save to be graded "
                    "(Ctrl-C ends the session)",
                    style="dim",
                )
            )
            ahead, own_tests, ticker = NextWorkers(workspace), OwnTestsVerdict(), Ticker(console)

            def graded() -> None:
                _clear_status(console)
                with_tests = not own_tests.covers(verbs.files(workspace, chosen)[1])
                save(
                    console,
                    workspace,
                    ahead.take(with_tests),
                    ticking=console.is_terminal,
                    own_tests=own_tests,
                )
                ticker.reread()
                ahead.start()  # torch imported in them while the files are edited

            try:
                watch(
                    paths,
                    graded,
                    poll=POLL_SECONDS,
                    stop=lambda: ticker.time_up(workspace, time.time()),
                )
            finally:
                _clear_status(console)
                ahead.close()
            console.print(
                Text("\nthe session ends: the final grade, with the hidden cases", style="bold")
            )
            return end(console, workspace)
    except (record.SessionBusy, OSError, ValueError) as exc:  # ValueError: a record edited
        return _error(console, exc)


class Ticker:
    """The interactive verb's clock, asked once a poll (`time_up`): each low-time warning of
    WARNINGS (`warnings`) printed once, on a line of its own, when its time comes (one only, the
    latest due, for a session resumed late); in a terminal, the status line rewritten in place
    once a second. The record is read once a second: its clock (started, minutes) never
    changes."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.session: dict | None = None
        self.read = self.ticked = float("-inf")
        self.warned: set[int] = set()

    def reread(self) -> None:
        """The record has changed (a save): read it again at the next tick."""
        self.session = None

    def time_up(self, workspace: Path, now: float) -> bool:
        """Whether time is up at `now` (seconds since the epoch); the warnings and the status
        line as they fall due."""
        if now - self.read >= 1 or self.session is None:
            self.session, self.read = verbs.load(workspace), now
        left = verbs.time_left(self.session, now)
        due = [seconds for seconds in warnings(self.session, left) if seconds not in self.warned]
        if due:
            self.warned.update(due)
            _clear_status(self.console)
            self.console.print(
                Text(
                    WARNINGS[min(due)],
                    style="bold red" if min(due) == min(WARNINGS) else "bold yellow",
                )
            )  # wrapped at the terminal's width
            self.ticked = float("-inf")
        if self.console.is_terminal and now - self.ticked >= 1:
            self.ticked = now
            self.console.file.write("\r")
            # one line, cut to the terminal's width: "\r" rewrites a line, not a wrapped one
            self.console.print(status(self.session, now), end="", no_wrap=True, overflow="ellipsis")
            self.console.file.write("\x1b[K")
            self.console.file.flush()
        return left <= 0


def show_stage(console: Console, session: dict, stage: str) -> None:
    """Stage `stage`: the interviewer's prompt, the items it adds, its conceptual questions."""
    from graders.interview.questions import QUESTIONS

    track = tracks.get(session["track"])
    console.rule(Text(f"stage {printable(stage)}"), align="left")
    console.print(Text(" ".join(STAGE_PROMPTS[stage].split())))  # a paragraph, wrapped here
    console.print(Text("\nItems this stage adds:", style="bold"))
    for item in verbs.added_items(track, stage):
        console.print(Text(f"  {item.id}: {item.title}"))
    questions = verbs.questions(stage) if track.levels else []
    if questions:
        console.print(
            Text("\nQuestions (answer each under its heading in answers.md):", style="bold")
        )
        for item in questions:
            console.print(Text(f"  {item.id}: {QUESTIONS[item.id]}"))


def show_verdict(console: Console, saved: verbs.Saved) -> None:
    """A save's verdict: its snapshot, level and score, then each cause of what does not pass
    (graders.formats.causes), once: its lead with the first line of its message (printable)
    and the items it takes down."""
    from graders.formats.report import summary_lines

    event = saved.event
    console.rule(
        Text(f"{printable(event['snapshot'])} at {review.clock(event['t'])}"),
        align="left",
        style="dim",
    )
    console.print(summary_lines(saved.result))
    if saved.result.unavailable:
        console.print(Text(f"  not run: {quote(saved.result.unavailable)}"), overflow="fold")
    console.print(
        Text(
            f"{printable(event['level'])}, {event['score']:g} points, "
            f"{len(event['passing'])} of {len(saved.result.items)} items pass",
            style="bold green" if saved.result.passed else "bold",
        )
    )
    if saved.opened:
        console.print(
            Text(
                f"Stage {printable(event['level'])} is complete: stage "
                f"{printable(saved.opened)} opens.",
                style="bold green",
            )
        )


def warnings(session: dict, left: float) -> list[int]:
    """The times of WARNINGS that `left` seconds are under, before time up: those shorter than
    the session (a 5-minute one is not told it has under 10 minutes)."""
    return [seconds for seconds in WARNINGS if 0 < left <= seconds < session["minutes"] * 60]


def status(session: dict, now: float) -> Text:
    """The status line: the time left, the stage and the level of the last save. Under each of
    WARNINGS' times, it says so, in yellow, then in red under the last."""
    left = verbs.time_left(session, now)
    saves = review.saves(session)
    level = saves[-1]["level"] if saves else "not graded yet"
    under = warnings(session, left)
    warning = f", under {min(under) // 60} minutes!" if under else ""
    style = ("bold red" if min(under) == min(WARNINGS) else "bold yellow") if under else "cyan"
    return Text(
        f"[{review.clock(left)} left{warning} | stage {printable(session['stage'])} | "
        f"level {printable(level)} | {len(saves)} saves]",
        style=style,
    )


def _clear_status(console: Console) -> None:
    """In a terminal, erase the ticking status line, so that what follows starts a clean line."""
    if console.is_terminal:
        console.file.write("\r\x1b[K")
        console.file.flush()


def _error(console: Console, exc: Exception) -> int:
    """A one-line error, exit 2: every path and message in it printable, a newline included."""
    message = getattr(exc, "strerror", None) and f"{exc.strerror} ({exc.filename})" or str(exc)
    console.print(Text(f"kata: error: {one_line(message)}"), soft_wrap=True)
    return USAGE_ERROR


def one_line(text: str) -> str:
    """`text` as a one-line error shows it: printable (graders.shared.untrusted.quote), its
    newlines escaped."""
    return quote(text).replace("\n", "\\x0a")
