"""Paths the judge is pointed at, and the targets its reports are written to.

- Report files write where the user pointed (graders.shared.output_files): `-` is standard output, a
  character device or a FIFO is written through (never replaced), a symbolic link writes its
  target (atomically, the link kept), any other kind of file is refused before the grade. Text
  that UTF-8 cannot hold does not crash the write.
- `kata grade PATH` on a symbolic link grades its target only when that is a regular .py file.
- A selection of no item is a usage error.

The CLI runs in-process from a temporary folder, with relative paths; the tests that grade are
marked slow (each starts worker processes).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from graders.shared.output_files import STDOUT, OutputError, check_writable, write_atomically
from graders.shared.tracks import DENSE
from graders.workflows.target import check_selection, python_file
from tests.grading import stand_in

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "solutions" / "kv_cache.py"
SECRET = "kata-secret-4f1d9c0e"
runner = CliRunner()


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A fresh folder, outside the kata, that the commands run in."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def kata(*args: str):
    return runner.invoke(app, list(args))


def one_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kata: error: "), result.output
    return lines[0]


# --- where a report is written -----------------------------------------------------------------


def test_a_dash_writes_to_standard_output_and_makes_no_file(here, capfdbinary):
    write_atomically(STDOUT, '{"a": 1}\n')
    assert capfdbinary.readouterr().out == b'{"a": 1}\n'
    assert list(here.iterdir()) == []


def test_a_character_device_is_written_through_and_stays_a_device():
    check_writable(Path("/dev/null"))
    write_atomically(Path("/dev/null"), "the report")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_device_that_refuses_the_write_raises_an_os_error_and_stays_a_device():
    with pytest.raises(OSError, match="No space left"):
        write_atomically(Path("/dev/full"), "the report")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_fifo_is_written_through_to_its_reader(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    check_writable(fifo)
    read = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()))
    reader.start()
    write_atomically(fifo, "through the pipe ✓")
    reader.join(timeout=10)
    assert read == ["through the pipe ✓".encode()]
    assert stat.S_ISFIFO(fifo.lstat().st_mode), "the FIFO was not replaced"


def test_a_pipe_named_by_its_descriptor_is_written_through():
    read, write = os.pipe()
    try:
        write_atomically(Path(f"/dev/fd/{write}"), "through the descriptor")
    finally:
        os.close(write)
    with os.fdopen(read, "rb") as pipe:
        assert pipe.read() == b"through the descriptor"


def test_a_file_this_process_has_open_gets_the_report_after_what_it_holds(tmp_path):
    """/dev/stdout redirected to a file (`kata grade --json /dev/stdout > out.txt`): the report
    follows what was printed, in the same file, which is not replaced."""
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:
        stdout.write("the printed report\n")
        stdout.flush()
        inode = out.stat().st_ino
        write_atomically(Path(f"/proc/self/fd/{stdout.fileno()}"), '{"score": 10}\n')
    assert out.read_text() == 'the printed report\n{"score": 10}\n'
    assert out.stat().st_ino == inode


def test_a_symlink_writes_its_target_atomically_and_stays_a_link(tmp_path):
    (tmp_path / "reports").mkdir()
    target = tmp_path / "reports" / "real.json"
    target.write_text("old")
    target.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(Path("reports", "real.json"))
    check_writable(link)
    write_atomically(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(Path("reports", "real.json"))
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.json", "reports"]
    assert [p.name for p in (tmp_path / "reports").iterdir()] == ["real.json"], "no temporary"


def test_a_chain_of_links_to_a_new_file_makes_the_file_at_its_end(tmp_path):
    (tmp_path / "second").symlink_to(tmp_path / "new.json")
    (tmp_path / "first").symlink_to(tmp_path / "second")
    write_atomically(tmp_path / "first", "made")
    assert (tmp_path / "new.json").read_text() == "made"
    assert (tmp_path / "first").is_symlink() and (tmp_path / "second").is_symlink()


@pytest.fixture
def a_socket(tmp_path):
    path = tmp_path / "s.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    yield path
    server.close()


@pytest.mark.parametrize("kind", ["socket", "folder", "link-to-socket", "link-to-folder"])
def test_a_target_that_is_not_a_file_is_refused_in_one_line_and_left_alone(
    tmp_path, a_socket, kind
):
    (tmp_path / "folder").mkdir()
    (tmp_path / "link-to-socket").symlink_to(a_socket)
    (tmp_path / "link-to-folder").symlink_to(tmp_path / "folder")
    path = a_socket if kind == "socket" else tmp_path / kind
    with pytest.raises(OutputError) as refused:
        check_writable(path)
    assert "\n" not in str(refused.value) and (
        "socket" in str(refused.value) or "folder" in str(refused.value)
    )
    with pytest.raises((OutputError, OSError)):
        write_atomically(path, "x")
    assert stat.S_ISSOCK(a_socket.lstat().st_mode) and (tmp_path / "folder").is_dir()
    assert list((tmp_path / "folder").iterdir()) == []


def test_a_block_device_is_refused_and_left_alone(tmp_path):
    device = tmp_path / "loop"
    try:
        os.mknod(device, stat.S_IFBLK | 0o600, os.makedev(7, 0))
    except OSError as exc:  # making a device node needs root (and a container that lets it)
        pytest.skip(f"cannot make a block device here: {exc.strerror}")
    with pytest.raises(OutputError, match="block device"):
        check_writable(device)
    with pytest.raises(OutputError, match="block device"):
        write_atomically(device, "x")
    assert stat.S_ISBLK(device.lstat().st_mode)


def test_text_with_lone_surrogates_is_written_escaped_not_a_crash(tmp_path):
    write_atomically(tmp_path / "r.md", "name \udcff\ud800 end")
    written = (tmp_path / "r.md").read_bytes()
    assert written.decode("utf-8") == "name \\udcff\\ud800 end"


# --- the CLI's report options ------------------------------------------------------------------


@pytest.mark.slow
def test_json_dash_goes_to_standard_output_alone(here):
    shutil.copyfile(REFERENCE, here / "kv_cache.py")
    done = kata("grade", "kv_cache.py", "--level", "L4", "--sandbox", "process", "--json", "-")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["score"] == 10, "stdout holds the JSON and nothing else"
    assert "append-time-dim" in done.stderr, "the terminal's report went to stderr"
    assert not (here / "-").exists(), "no file named -"


@pytest.mark.slow  # the CLI as a process, its stdout a file
def test_json_to_dev_stdout_follows_the_report_in_the_redirected_file(here):
    import subprocess
    import sys

    shutil.copyfile(REFERENCE, here / "kv_cache.py")
    with (here / "out.txt").open("wb") as out:
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "cli.py"),
                "grade",
                "kv_cache.py",
                "--level",
                "L4",
                "--sandbox",
                "process",
                "-q",
                "--json",
                "/dev/stdout",
            ],
            stdout=out,
            stderr=subprocess.PIPE,
        )
    assert done.returncode == 0, done.stderr.decode()
    text = (here / "out.txt").read_text()
    report, _, written = text.partition("{")
    assert "Partial run" in report and json.loads("{" + written)["score"] == 10


@pytest.mark.slow
def test_reports_through_a_link_a_device_and_a_fifo(here):
    shutil.copyfile(REFERENCE, here / "kv_cache.py")
    (here / "out").mkdir()
    (here / "card.md").symlink_to(Path("out", "scorecard.md"))
    os.mkfifo(here / "junit.fifo")
    read = []
    reader = threading.Thread(target=lambda: read.append((here / "junit.fifo").read_bytes()))
    reader.start()
    done = kata(
        "grade",
        "kv_cache.py",
        "--level",
        "L4",
        "--sandbox",
        "process",
        "--json",
        "/dev/null",
        "--markdown",
        "card.md",
        "--junit",
        "junit.fifo",
    )
    reader.join(timeout=30)
    assert done.exit_code == 0, done.output
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert (here / "card.md").is_symlink()
    assert "append-time-dim" in (here / "out" / "scorecard.md").read_text()
    assert read and read[0].startswith(b"<?xml") and b"append-time-dim" in read[0]
    assert stat.S_ISFIFO((here / "junit.fifo").lstat().st_mode)


def test_a_report_path_that_is_a_socket_stops_the_grade_before_it_starts(
    here, a_socket, monkeypatch
):

    stand_in(monkeypatch, lambda request, on_item: pytest.fail("graded"))
    shutil.copyfile(REFERENCE, here / "kv_cache.py")
    (here / "r.json").symlink_to(a_socket)
    done = kata("grade", "kv_cache.py", "--json", "r.json")
    assert done.exit_code == 2
    assert "--json: cannot write" in one_line(done) and "socket" in one_line(done)


def test_two_reports_to_standard_output_are_a_usage_error(here):
    shutil.copyfile(REFERENCE, here / "kv_cache.py")
    done = kata("grade", "kv_cache.py", "--json", "-", "--junit", "-")
    assert done.exit_code == 2 and "standard output" in one_line(done)


# --- what `kata grade` grades ----------------------------------------------------------------


@pytest.fixture
def links(tmp_path) -> Path:
    """Links named like candidate files: to a secret outside, to a FIFO, to a real .py file."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "id_rsa").write_text(f"{SECRET}\n")
    os.mkfifo(tmp_path / "outside" / "pipe.py")
    shutil.copyfile(REFERENCE, tmp_path / "outside" / "real.py")
    (tmp_path / "work").mkdir()
    for name, target in (
        ("secret.py", "id_rsa"),
        ("pipe_link.py", "pipe.py"),
        ("real_link.py", "real.py"),
    ):
        (tmp_path / "work" / name).symlink_to(tmp_path / "outside" / target)
    os.mkfifo(tmp_path / "work" / "fifo.py")
    return tmp_path / "work"


@pytest.mark.parametrize(
    "name, says",
    [
        ("secret.py", "is a link to a file that is not a Python file"),
        ("pipe_link.py", "is not a regular file"),
        ("fifo.py", "is not a regular file"),
    ],
)
def test_python_file_refuses_a_link_or_a_file_that_is_not_a_regular_py_file(links, name, says):
    with pytest.raises(ValueError, match=says):
        python_file(links / name, "implementation")


def test_python_file_accepts_a_link_to_a_regular_py_file(links):
    assert python_file(links / "real_link.py", "implementation") == links / "real_link.py"


@pytest.mark.parametrize(
    "args",
    [["secret.py"], ["kv_cache.py", "--tests", "secret.py"], ["fifo.py"]],
    ids=["implementation", "tests", "fifo"],
)
def test_grade_refuses_a_link_to_a_secret_in_one_line_and_never_reads_it(links, monkeypatch, args):

    monkeypatch.chdir(links)
    stand_in(monkeypatch, lambda request, on_item: pytest.fail("graded"))
    shutil.copyfile(REFERENCE, links / "kv_cache.py")
    done = kata("grade", *args)
    assert done.exit_code == 2 and args[-1] in one_line(done)
    assert SECRET not in done.output


def test_a_secret_linked_as_the_test_file_beside_is_refused(links, monkeypatch):
    monkeypatch.chdir(links)
    shutil.copyfile(REFERENCE, links / "kv_cache.py")
    (links / "test_kv_cache.py").symlink_to(links.parent / "outside" / "id_rsa")
    done = kata("grade", "kv_cache.py")
    assert done.exit_code == 2 and "test file" in one_line(done) and SECRET not in done.output


@pytest.mark.slow
def test_grade_grades_the_target_of_a_link_to_a_regular_py_file(links, monkeypatch):
    monkeypatch.chdir(links)
    done = kata(
        "grade", "real_link.py", "--level", "L4", "--sandbox", "process", "--json", "r.json"
    )
    assert done.exit_code == 0, done.output
    assert json.loads((links / "r.json").read_text())["implementation"] == "real_link.py"


@pytest.mark.slow
def test_grade_names_a_candidates_folder_printable(here):
    folder = here / "sub\x1b]0;owned\x07\u202e"
    folder.mkdir()
    shutil.copyfile(REFERENCE, folder / "kv_cache.py")
    done = kata(
        "grade",
        str(folder.relative_to(here) / "kv_cache.py"),
        "--level",
        "L4",
        "--sandbox",
        "process",
    )
    assert done.exit_code == 0, done.output
    assert "\x1b" not in done.output and "\x07" not in done.output and "\u202e" not in done.output
    assert "kata grade sub\\x1b]0;owned\\x07\\u202e/kv_cache.py" in done.output


@pytest.mark.parametrize(
    "name",
    [
        "plain/kv_cache.py",
        "a b/it's.py",
        "esc\x1b]0;owned\x07/k.py",
        "bidi\u202e/k.py",
        "not-utf8-\udcff/k.py",
        "c1\x9b/k.py",
    ],
)
def test_the_regrade_command_is_printable_and_runs_on_the_same_path(name):
    import subprocess

    from graders.shared.untrusted import printable
    from graders.workflows.target import regrade_command

    command = regrade_command(name, None, DENSE)
    assert printable(command) == command
    echoed = subprocess.run(
        ["bash", "-c", command.replace("kata grade", "printf %s", 1)],
        capture_output=True,
        env={"LANG": "C.UTF-8"},
        check=True,
    ).stdout
    assert echoed == os.fsencode(name)


# --- a selection of nothing ------------------------------------------------------------------


@pytest.mark.parametrize("items, level", [(["gqa"], "L5"), (["gqa", "prealloc"], "L4")])
def test_a_selection_that_selects_no_item_is_refused(items, level):
    with pytest.raises(ValueError, match="choose no item"):
        check_selection(DENSE, items, level)
    check_selection(DENSE, [*items, "attend-shape"], level)  # one item in reach: fine


def test_grade_with_a_selection_of_nothing_exits_2_with_one_line(here, monkeypatch):

    stand_in(monkeypatch, lambda request, on_item: pytest.fail("graded"))
    shutil.copyfile(REFERENCE, here / "kv_cache.py")
    done = kata("grade", "kv_cache.py", "--level", "L5", "--item", "gqa")
    assert done.exit_code == 2
    assert one_line(done) == (
        "kata: error: --level L5 and --item gqa choose no item: it is above L5"
    )
