"""Attacks on what tracelink reads and prints (issue 22, classes 2, 3, 4, 6, 7 and part of 8).

Each test plays the attacker: it edits a received profile's JSON, crafts a name, damages a cache or
sends a signal, then checks that nothing was disclosed or changed outside, that the error is one line
and that no process is left.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import tracy_synth
from tests.test_bad_input import TRACELINK, error_line
from tests.test_safety import program
from tests.test_signals import descendants, group_alive, running
from tracelink.report.signing import signed_by_this_user

SECRET = "DECOY-SECRET-7f3a9c: the content no report may hold"


def checksums(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root`` (links not followed), by relative path."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


def cli(*args: str | bytes, cwd: Path, cache: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*TRACELINK, *args], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          env=os.environ | {"XDG_CACHE_HOME": str(cache)})


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One cache folder for the module's runs (the machine is measured once), seeded from the user's."""
    folder = tmp_path_factory.mktemp("cache")
    user = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tracelink" / "machine.json"
    if user.is_file():
        (folder / "tracelink").mkdir()
        shutil.copy(user, folder / "tracelink" / "machine.json")
    return folder


@pytest.fixture(scope="module")
def victim(tmp_path_factory) -> Path:
    """A decoy tree: a secret file the attacker wants, beside the places tracelink runs from."""
    root = tmp_path_factory.mktemp("victim")
    (root / "home").mkdir()
    (root / "home" / "secret.txt").write_text(SECRET + "\n")
    (root / "home" / "notes.py").write_text(SECRET + "\n")
    return root


@pytest.fixture(scope="module")
def own_profile(tmp_path_factory, cache, victim) -> Path:
    """A profile this user made of a program in its own directory, run from the decoy home."""
    base = tmp_path_factory.mktemp("own")
    (base / "proj").mkdir()
    source = base / "proj" / "model.mlir"
    source.write_text(program("model", matmuls=2, loc=' loc("mm"("notes.py":1:1))'))
    done = cli("profile", str(source), "-o", str(base / "out"), "--repetitions", "2", cwd=victim / "home", cache=cache)
    assert done.returncode == 0, done.stderr
    return base / "out"


def test_the_working_directory_is_no_root_unless_the_program_is_under_it(own_profile, victim):
    # run from the decoy home, the program elsewhere: its location "notes.py" names a file of the cwd
    report = (own_profile / "report.html").read_text()
    assert SECRET not in report
    assert "notes.py: outside the allowed source roots" in report
    assert "%zero = arith.constant" in report  # the program's own directory is a root


@pytest.mark.parametrize("where", ["/", "home"])
def test_running_from_the_root_or_home_opens_nothing(victim, tmp_path, cache, where):
    """The program is under the cwd, but / or the home directory is no root: a location naming the secret
    by its absolute path is refused."""
    home = victim / "home"
    (home / "proj").mkdir(exist_ok=True)
    source = home / "proj" / f"from_{where.strip('/') or 'root'}.mlir"
    source.write_text(program("m", loc=f' loc("mm"("{home}/secret.txt":1:1))'))
    out = tmp_path / "out"
    env_home = {"HOME": str(home)} if where == "home" else {}
    done = subprocess.run([*TRACELINK, "profile", str(source), "-o", str(out), "--repetitions", "2"], capture_output=True, text=True,
                          cwd="/" if where == "/" else home, timeout=300, env=os.environ | {"XDG_CACHE_HOME": str(cache)} | env_home)
    assert done.returncode == 0, done.stderr
    report = (out / "report.html").read_text()
    assert SECRET not in report and f"{home}/secret.txt: outside the allowed source roots" in report
    assert "%zero = arith.constant" in report  # the program's own directory still is a root


def test_own_profile_keeps_its_roots_for_a_later_report(own_profile, tmp_path, cache):
    copy = tmp_path / "copy"
    shutil.copytree(own_profile, copy)
    done = cli("report", str(copy), cwd=tmp_path, cache=cache)
    assert done.returncode == 0, done.stderr
    assert "%zero = arith.constant" in (copy / "report.html").read_text()  # signed by this user: believed


@pytest.mark.parametrize("edit", ["roots", "map", "program", "dump", "all"])
def test_an_edited_profile_discloses_no_local_file(own_profile, victim, tmp_path, cache, edit):
    received = tmp_path / "received"
    shutil.copytree(own_profile, received)
    summary = json.loads((received / "profile.json").read_text())
    home = str(victim / "home")
    if edit in ("roots", "all"):
        summary["allowed_roots"] = ["/", home]
        summary["source_roots"] = ["/", home]
    if edit in ("map", "all"):
        summary["source_map"] = [["notes.py", f"{home}/notes.py"], ["/", home]]
    if edit in ("program", "all"):
        summary["program"] = f"{home}/secret.txt"
    (received / "profile.json").write_text(json.dumps(summary))
    if edit in ("dump", "all"):
        graph = json.loads((received / "provenance.json").read_text())
        escape = os.path.relpath(victim / "home" / "secret.txt", received / "artifacts")
        for node in graph["nodes"]:
            if node.get("source_file"):
                node["source_file"] = escape
        (received / "provenance.json").write_text(json.dumps(graph))
    before = checksums(victim)
    done = cli("report", str(received), cwd=victim / "home", cache=cache)  # run from the directory holding the secret
    assert done.returncode == 0, done.stderr
    report = (received / "report.html").read_text()
    assert SECRET not in report
    if edit in ("roots", "map", "all"):  # the signed fields: the profile's roots are refused as a whole
        assert "profile.json's roots are not used" in report
    assert checksums(victim) == before
    # the user's own command line still allows what they name
    done = cli("report", str(received), "--source-root", str(own_profile.parent / "proj"), cwd=tmp_path, cache=cache)
    assert done.returncode == 0 and SECRET not in (received / "report.html").read_text()


def test_a_received_profile_with_a_forged_signature_is_not_believed(own_profile, victim, tmp_path, cache):
    received = tmp_path / "received"
    shutil.copytree(own_profile, received)
    summary = json.loads((received / "profile.json").read_text())
    summary["allowed_roots"] = [str(victim / "home")]
    summary["sources_signature"] = "0" * 64
    summary["program"] = str(victim / "home" / "secret.txt")
    (received / "profile.json").write_text(json.dumps(summary))
    assert cli("report", str(received), cwd=tmp_path, cache=cache).returncode == 0
    assert SECRET not in (received / "report.html").read_text()
    # another user (another key) made the profile: nothing it recorded is believed either
    other_cache = tmp_path / "other-user"
    done = cli("report", str(own_profile), "-o", str(tmp_path / "other.html"), cwd=tmp_path, cache=other_cache)
    assert done.returncode == 0, done.stderr
    assert "%zero = arith.constant" not in (tmp_path / "other.html").read_text()


SIGN_WHEN_TOLD = """
import os, sys
from tracelink.report.signing import sign
print("ready", flush=True)
while not os.path.exists(sys.argv[1]):  # spinning, not sleeping: the runs on the cores then leave together
    pass
print(sign({"run": int(sys.argv[2])}))
"""


def test_runs_that_make_the_first_key_at_once_all_sign_with_the_key_kept(tmp_path, monkeypatch):
    """Four runs find no key and sign at the same moment: every signature is believed afterwards (a run
    that replaced another's new key, or read it half written and took it for damaged, or gave up when
    another made it first, would leave a profile unsigned), and no file but the key is left in the cache."""
    cache, go = tmp_path / "cache", tmp_path / "go"
    runs = [subprocess.Popen([sys.executable, "-c", SIGN_WHEN_TOLD, str(go), str(n)], stdout=subprocess.PIPE, text=True,
                             env=os.environ | {"XDG_CACHE_HOME": str(cache)}) for n in range(4)]
    assert [run.stdout.readline().strip() for run in runs] == ["ready"] * 4  # every interpreter has imported
    go.touch()
    signatures = [run.communicate(timeout=120)[0].strip() for run in runs]
    assert all(run.returncode == 0 for run in runs)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    assert [signed_by_this_user({"run": n}, signature) for n, signature in enumerate(signatures)] == [True] * 4
    assert sorted(path.name for path in (cache / "tracelink").iterdir()) == ["profile-key"]


TERMINAL_ATTACKS = ("\x1b]0;PWNED-TITLE\x07", "\x1b]52;c;cm0gLXJmIH4=\x07", "\x1b[2J\x1b[H", "\x9b31m", "\u202e")


def no_terminal_controls(text: str) -> bool:
    return not any(c in text for c in ("\x1b", "\x07", "\x9b", "\u202e"))


def test_control_characters_in_location_names_never_reach_the_terminal(tmp_path, cache):
    escaped = "".join(f"\\{ord(c):02X}" if ord(c) < 0x80 and not c.isalnum() else c for c in "".join(TERMINAL_ATTACKS[:3]))
    source = tmp_path / "evil.mlir"
    source.write_text(program("evil", loc=f' loc("mm{escaped}"("{escaped}evil.py":3:1))'))
    done = cli("profile", str(source), "-o", str(tmp_path / "out"), "--repetitions", "2", cwd=tmp_path, cache=cache)
    assert done.returncode == 0, done.stderr
    assert "evil.py" in done.stdout + done.stderr  # the name is printed, escaped
    assert no_terminal_controls(done.stdout + done.stderr)
    assert "\\x1b[2J\\x1b[Hevil.py:3" in done.stdout  # the hottest line, its name cut from the left to fit


def test_control_characters_in_an_onnx_models_names_never_reach_the_terminal(tmp_path, cache):
    """onnxruntime, the ONNX model's reference, logs to the terminal itself: an unused initializer makes it
    warn, naming it. A name with escape sequences would reach the terminal as they are."""
    hostile = "w" + "".join(TERMINAL_ATTACKS[:3])
    unused = numpy_helper.from_array(np.ones(4, np.float32), hostile)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "evil",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [unused])
    model = tmp_path / "evil.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), model)
    done = cli("profile", str(model), "-o", str(tmp_path / "out"), "--repetitions", "2", cwd=tmp_path, cache=cache)
    assert done.returncode == 0, done.stderr
    assert "onnxruntime" in done.stdout  # the reference ran
    assert no_terminal_controls(done.stdout + done.stderr)


def test_control_characters_in_tracy_names_never_reach_the_terminal(tmp_path, cache):
    capture = tmp_path / "evil.tracy"
    hostile = "".join(TERMINAL_ATTACKS)
    locations = [tracy_synth.SourceLocation(f"zone{hostile}[link=http://x]", "f", f"{hostile}.c", 1)]
    tracy_synth.write_capture(capture, {(1, f"thread{hostile}[link=http://x]y"): [tracy_synth.Zone(1, 10, 20)]}, locations)
    done = cli("ingest", str(capture), "-o", str(tmp_path / "zones"), cwd=tmp_path, cache=cache)
    assert done.returncode == 0, done.stderr
    assert "zone\\x1b]0;PWNED-TITLE" in done.stdout and "thread\\x1b" in done.stdout
    assert no_terminal_controls(done.stdout + done.stderr)
    assert "[link=http://x]" in done.stdout  # printed as text, not read as rich markup (an OSC 8 link)


def test_terminal_console_keeps_its_own_colours_and_escapes_the_text():
    import io

    from rich.text import Text

    from tracelink.textsafe import TerminalConsole

    out = io.StringIO()
    TerminalConsole(file=out, force_terminal=True, color_system="standard").print(Text("name" + "".join(TERMINAL_ATTACKS), style="red"))
    printed = out.getvalue()
    assert printed.startswith("\x1b[31m")  # rich's colour
    assert printed.count("\x1b") == 2 and "\\x1b]0;PWNED-TITLE" in printed and "\\x9b31m" in printed and "\\u202e" in printed


def test_a_one_megabyte_name_is_profiled_and_reported_in_bounded_size(tmp_path, cache):
    name = "N" * 1_000_000
    source = tmp_path / "long.mlir"
    source.write_text(program("long", loc=f' loc("{name}"("x.py":1:1))'))
    out = tmp_path / "out"
    done = cli("profile", str(source), "-o", str(out), "--repetitions", "2", cwd=tmp_path, cache=cache, timeout=240)
    assert done.returncode == 0, done.stderr
    done = cli("report", str(out), cwd=tmp_path, cache=cache, timeout=120)  # took 288 s for 100 KB
    assert done.returncode == 0, done.stderr
    report = (out / "report.html").read_text()
    assert "N" * 1000 in report and "N" * 1001 not in report  # what the report shows of one name is bounded
    assert len(report) < 2_000_000


def test_a_thousand_distinct_frames_are_reported(tmp_path, cache):
    frames = "".join(f'callsite("f{i}"("m{i}.py":{i + 1}:1) at ' for i in range(1000))
    source = tmp_path / "deep.mlir"
    source.write_text(program("deep", loc=f" loc({frames}\"leaf.py\":1:1{')' * 1000})"))
    out = tmp_path / "out"
    done = cli("profile", str(source), "-o", str(out), "--repetitions", "2", cwd=tmp_path, cache=cache)
    assert done.returncode == 0, done.stderr  # the flame graph raised RecursionError and no report was written
    report = (out / "report.html").read_text()
    assert 'id="flame-svg"' in report and "m999.py" in report


def test_the_report_cuts_long_labels_in_linear_time():
    from tracelink.report.layout import short_label

    for size in (1_000, 1_000_000):
        started = time.process_time()
        label = short_label("N" * size, 200.0, from_left=True)
        assert label.startswith("…") and len(label) < 40
        assert time.process_time() - started < 5  # the cut-and-measure loop was quadratic: minutes for 100 KB


def test_a_tuning_history_with_nan_is_reported_once_and_cleaned(tmp_path, capfd):
    from tracelink.tune.model import DERIVED, History

    rows = np.random.default_rng(0).random((40, len(DERIVED) + 1)).astype(np.float32)
    rows[3, 1], rows[7, -1], rows[9, -1] = np.nan, np.inf, 5.0
    path = tmp_path / "history.npy"
    np.save(path, rows)
    history = History(path)
    assert len(history.rows) == 37 and np.isfinite(history.rows).all()
    assert "3 tuning history rows with NaN" in capfd.readouterr().err
    assert len(History(path).rows) == 37 and capfd.readouterr().err == ""  # the file was rewritten: said once
    path.write_bytes(b"\x93NUMPY garbage")
    assert len(History(path).rows) == 0 and "unreadable tuning history" in capfd.readouterr().err


@pytest.fixture(scope="module")
def slow(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("slow") / "slow.mlir"
    path.write_text(program("slow", matmuls=4).replace("32x32", "256x256"))
    return path


def start_profile(slow: Path, out: Path, cache: Path, repetitions: int = 1_000_000) -> subprocess.Popen:
    command = [*TRACELINK, "profile", str(slow), "-o", str(out), "--repetitions", str(repetitions)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=out.parent, start_new_session=True,
                            env=os.environ | {"XDG_CACHE_HOME": str(cache)})


def wait_for(process: subprocess.Popen, ready, limit: float = 180) -> dict[int, tuple[int, str]]:
    deadline = time.monotonic() + limit
    while not ready(children := descendants(process.pid)):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "never got there"
        time.sleep(0.05)
    return children


def gone_within(pids: set[int], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while any(Path(f"/proc/{pid}").exists() and not is_zombie(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z"


@pytest.mark.parametrize("signal_number", [signal.SIGHUP, signal.SIGKILL])
def test_no_tool_outlives_tracelink(slow, tmp_path, cache, signal_number):
    process = start_profile(slow, tmp_path / "out", cache)
    try:
        children = wait_for(process, running("iree-benchmark"))
        tools = set(children)
        process.send_signal(signal_number)
        _, stderr = process.communicate(timeout=30)
        assert gone_within(tools, 2.0), f"left running: {[children[p] for p in tools if Path(f'/proc/{p}').exists()]}"
        assert not [g for g in {group for group, _ in children.values()} if group_alive(g)]
        if signal_number == signal.SIGHUP:
            assert process.returncode == 128 + signal.SIGHUP and "interrupted (SIGHUP)" in stderr, stderr
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_tool_the_guard_was_never_told_of_is_killed_by_its_tmpdir(tmp_path):
    """tracelink killed between starting a tool and telling its guard: the guard still finds the tool."""
    started = tmp_path / "tool.pid"
    script = (
        "import os, signal, subprocess, sys\n"
        "from tracelink import tools\n"
        "tools.guard()\n"  # what start_process does first; the '+' line for the tool is never written
        "tool = subprocess.Popen(['sleep', '60'], start_new_session=True, env=os.environ | {'TMPDIR': str(tools.tools_temp_dir())})\n"
        f"open({str(started)!r}, 'w').write(str(tool.pid))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60)
    assert done.returncode == -signal.SIGKILL
    assert gone_within({int(started.read_text())}, 5.0), "the tool outlived tracelink"


def test_sigterm_during_the_first_machine_measurement_leaves_no_probe(slow, tmp_path):
    process = start_profile(slow, tmp_path / "out", tmp_path / "empty-cache", 2)  # no machine.json: measured before the timed run
    try:
        children = wait_for(process, lambda found: sum(name.startswith("python") for _, name in found.values()) >= 1)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
        assert process.returncode == 143, stderr
        assert gone_within(set(children), 1.0), "a probe process outlived tracelink"
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_runtime_crash_reads_as_a_crash(slow, tmp_path, cache):
    from tracelink.tools import tool_path

    for tool in ("iree-benchmark-module", "iree-compile"):
        assert Path(tool_path(tool)).read_bytes()[:4] == b"\x7fELF"  # the binary itself, not pip's wrapper script
    process = start_profile(slow, tmp_path / "out", cache)
    try:
        children = wait_for(process, running("iree-benchmark"))
        os.kill(next(pid for pid, (_, name) in children.items() if name.startswith("iree-benchmark")), signal.SIGSEGV)
        _, stderr = process.communicate(timeout=60)
        line = error_line(subprocess.CompletedProcess([], process.returncode, "", stderr))
        assert "crashed (SIGSEGV)" in line and "exit 245" not in line
        # a signal sent from outside is no dispatch's fault: the run repeated under the hook, within twice the
        # crashed run's time, names none
        assert "the dispatch was not named" in line or "it did not crash" in line
        assert "the fault was in dispatch" not in line
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_a_non_utf8_file_name_is_one_line_naming_it(tmp_path, cache):
    source = tmp_path / "plain.mlir"
    source.write_text(program("m"))
    odd = os.fsencode(tmp_path) + b"/bad\xffname.mlir"
    os.rename(source, odd)
    done = subprocess.run([*(os.fsencode(word) for word in TRACELINK), b"profile", odd, b"-o", os.fsencode(tmp_path / "out")],
                          capture_output=True, cwd=tmp_path, env=os.environ | {"XDG_CACHE_HOME": str(cache)}, timeout=120)
    lines = [line for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, lines
    assert "bad\\udcffname.mlir: not valid UTF-8" in lines[0]


def test_a_bad_parameter_archive_is_named(tmp_path, cache):
    source = tmp_path / "m.mlir"
    source.write_text(program("m"))
    archive = tmp_path / "weights.irpa"
    archive.write_bytes(b"\x86\xdc\xf8\x44" + bytes(200))
    line = error_line(cli("profile", str(source), "-o", str(tmp_path / "out"), "--parameters", f"model={archive}", cwd=tmp_path, cache=cache))
    assert f"{archive}: not an IREE parameter archive" in line
    line = error_line(cli("profile", str(source), "-o", str(tmp_path / "out"), "--parameters", f"model={tmp_path}/none.irpa", cwd=tmp_path, cache=cache))
    assert "none.irpa: parameter archive unreadable" in line
