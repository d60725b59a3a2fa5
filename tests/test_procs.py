"""Processes around a shared region: a lock holder that is stopped (SIGSTOP, docker pause),
a lock word naming a live process that does not hold it, PID namespaces (a region left by a
namespace that is gone, a /proc that is not the process's own), and process slots (one per
process and region, whatever the number of objects).

Every scenario runs in subprocesses with a deadline: a hang fails the test.
"""

from __future__ import annotations

import mmap
import os
import queue
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import slidewin
from slidewin import Limiter

from conftest import skip_unless_ci

# every scenario runs in other processes (the `procs` group: CONTRIBUTING.md)
pytestmark = pytest.mark.procs

SHM = os.environ.get("SLIDEWIN_SHM_DIR", "/dev/shm")
DEADLINE = 60  # seconds: a scenario taking longer hangs
# the stuck-owner scenarios' processes take a live owner as stuck after 1 s, not 5 s (a test
# hook read at import: slidewin/_core, SLIDEWIN_TEST_LOCK_STUCK_MS)
STUCK_ENV = dict(os.environ, SLIDEWIN_TEST_LOCK_STUCK_MS="1000")


def region_path(name: str) -> str:
    return os.path.join(SHM, "slidewin-" + name)


def py(code: str, *args: str, **kw) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, **kw)
    p.lines = queue.Queue()

    def pump():
        for line in p.stdout:
            p.lines.put(line)
        p.lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return p


def stop(p: subprocess.Popen) -> None:
    """Kill p if it still runs, reap it, close its pipes."""
    if p.poll() is None:
        p.kill()
    p.wait()
    for f in (p.stdin, p.stdout, p.stderr):
        if f is not None:
            f.close()


class Workers:
    """The processes a test starts: every one is killed (if still running) and reaped, its
    pipes closed, when the test ends, however it ends."""

    def __init__(self) -> None:
        self.started: list = []

    def py(self, code: str, *args: str, **kw) -> subprocess.Popen:
        """A Python process running `code` with `args` (see py())."""
        p = py(code, *args, **kw)
        self.started.append(p)
        return p

    def sleeper(self) -> subprocess.Popen:
        """A live process that does nothing: the fake owner of a crafted lock word."""
        p = subprocess.Popen(["sleep", "600"])
        self.started.append(p)
        return p

    def stop_all(self) -> None:
        for p in self.started:
            stop(p)


@pytest.fixture
def workers():
    w = Workers()
    try:
        yield w
    finally:
        w.stop_all()


def send(p: subprocess.Popen, line: str = "go") -> None:
    """Write one line to p's stdin (the scripts below wait on sys.stdin.readline())."""
    p.stdin.write(line + "\n")
    p.stdin.flush()


def wait_stopped(pid: int, deadline: float) -> None:
    """Wait until process pid is stopped ('T': it stopped itself inside the lock)."""
    while proc_state(pid) != "T":
        assert time.monotonic() < deadline, "the holder never stopped"
        time.sleep(0.01)


def token(pid: int) -> int:
    """The lock word naming process pid as the owner (pid and start time)."""
    return pid << 32 | (start_time(pid) & 0xffffffff)


def proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def wait_line(p: subprocess.Popen, want: str, deadline: float) -> str:
    """Read p's stdout until a line starting with `want` (fail at the deadline: a hang)."""
    while True:
        try:
            line = p.lines.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no {want!r} from the process in time (hung)")
        assert line is not None, f"the process ended before {want!r}: {p.stderr.read()[-2000:]}"
        if line.startswith(want):
            return line.strip()


HOLDER = """
import sys, slidewin
from slidewin import _core
lim = slidewin.Limiter(qps=1e9, shared=sys.argv[1])
print("attached", flush=True)
sys.stdin.readline()
_core._set_test_hook(-1)   # stop this process (SIGSTOP) inside the next critical section
lim.try_acquire()
print("resumed", flush=True)
sys.stdin.readline()
"""

# a script's SIGALRM handler: it raises Alarm
ALARM = """
class Alarm(Exception):
    pass
def on_alarm(signum, frame):
    raise Alarm()
signal.signal(signal.SIGALRM, on_alarm)
"""

WAITER = """
import signal, sys, threading, time, slidewin
lim = slidewin.Limiter(qps=1e9, shared=sys.argv[1])
print("attached", flush=True)
sys.stdin.readline()                          # the holder is stopped inside the lock now
ticks = [0]
stop = False
def spin():
    while not stop:
        ticks[0] += 1
t = threading.Thread(target=spin, daemon=True)
t.start()
time.sleep(0.05)
# 1. a timeout is honoured, and the other thread runs meanwhile (the GIL is released)
before = ticks[0]
t0 = time.monotonic()
try:
    lim.acquire(timeout=0.5)
    got = True
except slidewin.BlockedError:
    got = False
took = time.monotonic() - t0
print("timeout", got, round(took, 2), ticks[0] - before, flush=True)
# 2. a signal handler runs, and its exception comes out of try_acquire
""" + ALARM + """signal.setitimer(signal.ITIMER_REAL, 0.3)
try:
    lim.try_acquire()
    print("alarm not raised", flush=True)
except Alarm:
    print("alarm raised", flush=True)
stop = True
print("waiting", flush=True)
sys.stdin.readline()                          # the holder was resumed or killed
print("after", lim.try_acquire(), flush=True)
"""


@pytest.mark.linux_core  # a stopped holder is told apart from a hung one by its /proc state
@pytest.mark.parametrize("then", ["SIGCONT", "SIGKILL"])
def test_a_stopped_lock_holder_leaves_threads_timeouts_and_signals_running(name, then,
                                                                          workers):
    deadline = time.monotonic() + DEADLINE
    waiter = workers.py(WAITER, name)
    holder = workers.py(HOLDER, name)
    wait_line(waiter, "attached", deadline)
    wait_line(holder, "attached", deadline)
    send(holder)
    wait_stopped(holder.pid, deadline)                 # stopped inside the lock
    send(waiter)
    line = wait_line(waiter, "timeout", deadline).split()
    assert line[1] == "False"                          # not admitted: the lock never came
    assert float(line[2]) < 30                         # returned, not hung (generous)
    assert int(line[3]) > 0                            # the other thread ran meanwhile
    assert wait_line(waiter, "alarm", deadline) == "alarm raised"
    wait_line(waiter, "waiting", deadline)
    os.kill(holder.pid, getattr(signal, then))
    if then == "SIGCONT":
        assert wait_line(holder, "resumed", deadline) == "resumed"
    send(waiter)
    assert wait_line(waiter, "after", deadline) == "after True"   # everything recovers
    assert waiter.wait(timeout=max(1, deadline - time.monotonic())) == 0


# ------------------------------------------------------------ a lock word naming a live pid

def craft_lock_word(name: str, token: int, at: int = 64) -> None:
    """Write `token` into the lock word of a shared region's state (at byte `at` of it: 64 for
    a Limiter's, 0 for a KeyedLimiter's)."""
    with open(region_path(name), "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        (off_state,) = struct.unpack_from("=Q", m, 72)
        struct.pack_into("=Q", m, off_state + at, token)


CRAFTED = """
import sys, time, slidewin
t0 = time.monotonic()
try:
    lim = slidewin.Limiter(qps=1e9, shared=sys.argv[1])
    print("attached", flush=True)
except OSError as e:
    print("refused", round(time.monotonic() - t0, 1), e, flush=True)
"""


@pytest.mark.linux_core  # the message names the holder's /proc state
def test_a_lock_word_naming_a_live_process_does_not_hang_attach(name, workers):
    Limiter(qps=1e9, shared=name)                     # the region exists
    sleeper = workers.sleeper()
    craft_lock_word(name, token(sleeper.pid))
    try:
        proc = subprocess.run([sys.executable, "-c", CRAFTED, name], capture_output=True,
                              text=True, timeout=DEADLINE, env=STUCK_ENV)
    except subprocess.TimeoutExpired:
        pytest.fail("attach hung on a lock word naming a live process")
    out, err = proc.stdout, proc.stderr
    assert out.startswith("refused"), (out, err)
    assert str(sleeper.pid) in out and "lock" in out, out
    # the owner is alive: it may be in use, so never the advice to unlink it
    assert f"held by live pid {sleeper.pid} (state S)" in out, out
    assert "unlink" not in out, out


# ------------------------------------------------------------------------- PID namespaces

def unshare(args: list, code: str, *argv: str) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(["unshare", *args, sys.executable, "-c", textwrap.dedent(code),
                               *argv], capture_output=True, text=True, timeout=DEADLINE,
                              cwd="/")
    except FileNotFoundError:
        skip_unless_ci("needs unshare (util-linux)")
    if proc.returncode != 0 and "unshare" in proc.stderr:
        skip_unless_ci("cannot make a PID namespace here: " + proc.stderr.strip()[:200])
    return proc


HOLD_AND_EXIT = """
import os, sys, slidewin
lim = slidewin.Limiter(concurrency=5, shared=sys.argv[1])
for _ in range(3):
    assert lim.try_acquire()
print("held", lim.in_flight, flush=True)
os._exit(0)
"""


@pytest.mark.linux_core  # PID namespaces (/proc/self/ns) and OFD locks
def test_a_region_left_by_a_pid_namespace_that_is_gone_is_reused(name):
    proc = unshare(["--pid", "--fork", "--mount-proc"], HOLD_AND_EXIT, name)
    assert proc.returncode == 0 and "held 3" in proc.stdout, proc.stderr
    lim = Limiter(concurrency=5, shared=name)         # taken over: no OSError (EXDEV)
    assert lim.in_flight == 0                         # the namespace's counts are gone
    assert sum(lim.try_acquire() for _ in range(10)) == 5
    # and another namespace (a restarted container) can take it over again
    proc = unshare(["--pid", "--fork", "--mount-proc"], HOLD_AND_EXIT, name)
    assert "PID namespace" in proc.stderr and proc.returncode != 0, proc.stderr  # we are alive
    del lim
    import gc
    gc.collect()
    proc = unshare(["--pid", "--fork", "--mount-proc"], HOLD_AND_EXIT, name)
    assert proc.returncode == 0 and "held 3" in proc.stdout, proc.stderr


@pytest.mark.linux_core  # checks /proc/self
def test_a_proc_that_is_not_the_processs_own_is_refused(name):
    code = """
    import sys, slidewin
    try:
        slidewin.Limiter(qps=1, shared=sys.argv[1])
        print("accepted")
    except (OSError, ValueError) as e:
        print("refused:", e)
    """
    proc = unshare(["--pid", "--fork"], code, name)    # no --mount-proc: the host's /proc
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("refused:") and "/proc" in proc.stdout, proc.stdout


# ------------------------------------------------------------------------- process slots

def test_two_thousand_limiters_on_one_name_in_one_process(name):
    lims = [Limiter(concurrency=10**6, shared=name) for _ in range(2000)]
    for lim in lims:
        assert lim.try_acquire()
    assert lims[0].in_flight == 2000
    for lim in lims:
        lim.release()
    assert lims[-1].in_flight == 0


MANY_NAMES = """
import sys, slidewin
base = sys.argv[1]
# 130 endpoints limited on one name (as 130 @limit(shared=...) of a web app), and 30 names
lims = [slidewin.Limiter(concurrency=10**6, shared=base) for i in range(130)]
lims += [slidewin.Limiter(concurrency=1000, shared=f"{base}-{i}") for i in range(30)]
for lim in lims:
    assert lim.try_acquire()
print("ok", flush=True)
sys.stdin.readline()
"""


def test_many_processes_on_many_names(name, workers):
    deadline = time.monotonic() + DEADLINE
    try:
        procs = [workers.py(MANY_NAMES, name) for _ in range(9)]  # 9 x 130 > 1024 slots
        for p in procs:
            assert wait_line(p, "ok", deadline) == "ok"
        assert Limiter(concurrency=10**6, shared=name).in_flight == 9 * 130
        for i in range(30):
            assert Limiter(concurrency=1000, shared=f"{name}-{i}").in_flight == 9
    finally:
        workers.stop_all()
        for i in range(30):
            slidewin.unlink(f"{name}-{i}")


def test_a_dropped_objects_in_flight_count_comes_back(name):
    import gc

    keep = Limiter(concurrency=2, shared=name)
    dropped = Limiter(concurrency=2, shared=name)
    assert dropped.try_acquire() and dropped.try_acquire()
    assert keep.in_flight == 2 and not keep.try_acquire()
    del dropped
    gc.collect()
    assert keep.in_flight == 0
    assert keep.try_acquire()
    keep.release()


def test_a_fork_childs_copy_gives_back_nothing_of_the_parents(name):
    import gc

    lim = Limiter(concurrency=3, shared=name)
    assert lim.try_acquire() and lim.try_acquire()
    pid = os.fork()
    if pid == 0:                                     # the child drops its copy of lim
        code = 1
        try:
            del lim
            gc.collect()
            other = Limiter(concurrency=3, shared=name)
            code = 0 if other.in_flight == 2 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert lim.in_flight == 2                        # the parent's counts stay the parent's
    # released by another object of the process: dropping the acquirer gives back nothing more
    other = Limiter(concurrency=3, shared=name)
    other.release(2)
    assert other.in_flight == 0 and other.try_acquire()
    del lim
    gc.collect()
    assert other.in_flight == 1                      # other's own count stays
    other.release()


def test_a_dropped_keyed_limiters_in_flight_counts_come_back(name):
    import gc

    from slidewin import KeyedLimiter

    keep = KeyedLimiter(concurrency=2, shared=name)
    dropped = KeyedLimiter(concurrency=2, shared=name)
    assert keep.try_acquire("b")                     # keep's own count on "b"
    assert dropped.try_acquire("a") and dropped.try_acquire("a", 1)
    dropped.acquire("b")
    assert dropped.try_acquire(7)
    dropped.release(7)                               # released: nothing held on 7
    assert keep.in_flight("a") == 2 and keep.in_flight("b") == 2
    assert not keep.try_acquire("a")
    del dropped
    gc.collect()
    assert keep.in_flight("a") == 0                  # the dropped object's counts come back
    assert keep.in_flight("b") == 1                  # keep's own count stays
    assert keep.in_flight(7) == 0
    assert keep.try_acquire("a") and keep.try_acquire("a")
    keep.release("a", 2)
    keep.release("b")
    assert keep.in_flight("b") == 0


def test_a_dropped_keyed_limiter_gives_back_nothing_released_for_it(name):
    import gc

    from slidewin import KeyedLimiter

    dropped = KeyedLimiter(concurrency=5, shared=name)
    other = KeyedLimiter(concurrency=5, shared=name)
    assert dropped.try_acquire("a", 2)
    other.release("a", 2)                            # released for it by another object
    assert other.try_acquire("a", 3)                 # other's own 3
    del dropped
    gc.collect()
    assert other.in_flight("a") == 3                 # other's own counts stay
    other.release("a", 3)


def test_a_keyed_entry_keeps_its_limiter_alive(name):
    import gc
    import weakref

    from slidewin import KeyedLimiter

    other = KeyedLimiter(concurrency=2, shared=name)
    lim = KeyedLimiter(concurrency=2, shared=name)
    e = lim.entry("a")
    e.__enter__()
    ref = weakref.ref(lim)
    del lim
    gc.collect()
    assert ref() is not None and e.limiter is ref()  # an open entry keeps its limiter
    assert other.in_flight("a") == 1
    del e                                            # the entry, dropped open, gives back
    gc.collect()
    assert ref() is None
    assert other.in_flight("a") == 0


def test_a_fork_childs_keyed_copy_gives_back_only_its_own(name):
    import gc

    from slidewin import KeyedLimiter

    lim = KeyedLimiter(concurrency=5, shared=name)
    assert lim.try_acquire("a", 2) and lim.try_acquire("b")
    pid = os.fork()
    if pid == 0:                                     # the child's copy: its own count too
        code = 1
        try:
            other = KeyedLimiter(concurrency=5, shared=name)
            ok = lim.try_acquire("a") and lim.try_acquire("c", 2)
            ok = ok and other.in_flight("a") == 3 and other.in_flight("c") == 2
            del lim
            gc.collect()
            ok = ok and (other.in_flight("a"), other.in_flight("b"), other.in_flight("c")) \
                == (2, 1, 0)
            code = 0 if ok else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert (lim.in_flight("a"), lim.in_flight("b")) == (2, 1)   # the parent's stay
    # a child that never decided drops its copy: nothing of the parent's goes
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            del lim
            gc.collect()
            other = KeyedLimiter(concurrency=5, shared=name)
            code = 0 if (other.in_flight("a"), other.in_flight("b")) == (2, 1) else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert (lim.in_flight("a"), lim.in_flight("b")) == (2, 1)
    del lim
    gc.collect()
    assert KeyedLimiter(concurrency=5, shared=name).in_flight("a") == 0


# ------------------------------------------- a lock wait without the GIL, subinterpreters

SUBINTERP_WAITER = """
import sys, slidewin
from slidewin import _core
try:
    import _interpreters as interps
except ImportError:
    try:
        import _xxsubinterpreters as interps
    except ImportError:
        print("nosub", flush=True)
        sys.exit(0)
lim = slidewin.Limiter(qps=1e9, shared=sys.argv[1])
interps.create()          # from now on PyGILState_Check() answers 1 whatever the truth
print("attached", flush=True)
sys.stdin.readline()      # the holder is stopped inside the lock now
print("waiting", flush=True)
# waits without the GIL in the lock hook until the holder is killed (no SIGABRT from
# "PyEval_SaveThread: ... GIL is released")
print("after", _core._try_acquire_nogil(lim, 1), flush=True)
"""


@pytest.mark.linux_core  # a killed holder that no one has reaped yet reads as alive to kill(pid, 0)
def test_a_lock_wait_without_the_gil_survives_a_subinterpreter(name, workers):
    deadline = time.monotonic() + DEADLINE
    waiter = workers.py(SUBINTERP_WAITER, name)
    holder = workers.py(HOLDER, name)
    first = waiter.lines.get(timeout=DEADLINE)
    if first is not None and first.startswith("nosub"):
        pytest.skip("this Python has neither _interpreters nor _xxsubinterpreters")
    assert first is not None and first.startswith("attached"), waiter.stderr.read()[-2000:]
    wait_line(holder, "attached", deadline)
    send(holder)
    wait_stopped(holder.pid, deadline)                 # stopped inside the lock
    send(waiter)
    wait_line(waiter, "waiting", deadline)
    time.sleep(0.3)                                    # the waiter naps in the lock hook
    os.kill(holder.pid, signal.SIGKILL)
    assert wait_line(waiter, "after", deadline) == "after True"
    assert waiter.wait(timeout=max(1, deadline - time.monotonic())) == 0


# ---------------------------------------------------- a holder frozen by the cgroup freezer

FROZEN_WAITER = """
import sys, time, slidewin
lim = slidewin.Limiter(qps=1e9, shared=sys.argv[1])
print("attached", flush=True)
sys.stdin.readline()      # the holder is frozen inside the lock now
try:
    lim.acquire(timeout=float(sys.argv[2]))  # past the time after which a live owner is
                                             # stuck (1 s here: STUCK_ENV; 5 s by default)
    print("got", flush=True)
except slidewin.BlockedError:
    print("timeout", flush=True)
except OSError as e:
    print("oserror", e, flush=True)
sys.stdin.readline()      # the holder is thawed
print("after", lim.try_acquire(), flush=True)
"""


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


@pytest.mark.linux_core  # the cgroup freezer's state, read through /proc
def test_a_holder_frozen_by_the_cgroup_freezer_is_waited_for_not_called_damaged(name,
                                                                               workers):
    """docker pause freezes a container's cgroup: its tasks show 'S', not 'T'."""
    root = None
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            if parts[parts.index("-") + 1] == "cgroup2":
                root = parts[4]
                break
    group = os.path.join(root or "/sys/fs/cgroup", f"slidewin-test-{os.getpid()}")
    try:
        os.mkdir(group)
    except OSError as e:
        pytest.skip(f"no writable cgroup v2 here: {e}")
    deadline = time.monotonic() + DEADLINE
    waiter = workers.py(FROZEN_WAITER, name, "2.5", env=STUCK_ENV)
    holder = workers.py(HOLDER, name)
    frozen = False
    try:
        if not os.path.exists(os.path.join(group, "cgroup.freeze")):
            pytest.skip("this cgroup v2 has no freezer (cgroup.freeze)")
        wait_line(waiter, "attached", deadline)
        wait_line(holder, "attached", deadline)
        send(holder)
        wait_stopped(holder.pid, deadline)             # stopped inside the lock
        try:
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(holder.pid))
            with open(os.path.join(group, "cgroup.freeze"), "w") as f:
                f.write("1")
        except OSError as e:
            pytest.skip(f"cannot freeze a cgroup v2 here: {e}")
        frozen = True
        os.kill(holder.pid, signal.SIGCONT)            # frozen: it stays in the lock
        while "frozen 1" not in read_text(os.path.join(group, "cgroup.events")):
            assert time.monotonic() < deadline, "the cgroup never froze"
            time.sleep(0.01)
        while proc_state(holder.pid) == "T":
            assert time.monotonic() < deadline, "the frozen holder stayed 'T'"
            time.sleep(0.01)
        send(waiter)
        assert wait_line(waiter, "", deadline) == "timeout"   # waited, not "damaged"
        with open(os.path.join(group, "cgroup.freeze"), "w") as f:
            f.write("0")
        frozen = False
        assert wait_line(holder, "resumed", deadline) == "resumed"
        send(waiter)
        assert wait_line(waiter, "after", deadline) == "after True"
    finally:
        if frozen:
            with open(os.path.join(group, "cgroup.freeze"), "w") as f:
                f.write("0")
        workers.stop_all()                             # the cgroup goes once it is empty
        for _ in range(100):
            try:
                os.rmdir(group)
                break
            except OSError:
                time.sleep(0.05)


def start_on_a_stuck_word(workers, script: str, name: str, sleeper, held: str,
                          kind: str = "limiter"):
    """Start `script` on region `name` (kind "limiter" or "keyed"), wait for its `held` line,
    make the live `sleeper` the owner of the region's lock word, and tell the script to go on.
    Returns the process and the scenario's deadline."""
    p = workers.py(script, name, kind, env=STUCK_ENV)
    deadline = time.monotonic() + DEADLINE
    assert wait_line(p, "held", deadline) == held
    # a keyed table of 100 keys has one stripe: its lock after the layout's two lines
    craft_lock_word(name, token(sleeper.pid), at=128 if kind == "keyed" else 64)
    send(p)
    return p, deadline


RELEASER = """
import sys, time, slidewin
name = sys.argv[1]
lim = slidewin.Limiter(concurrency=5, shared=name)
other = slidewin.Limiter(concurrency=5, shared=name)   # a second object on the region
assert lim.try_acquire() and lim.try_acquire() and other.try_acquire()
print("held", lim.in_flight, flush=True)
sys.stdin.readline()                                    # the lock word is crafted
t0 = time.monotonic()
try:
    lim.release()
    print("released", flush=True)
except OSError as e:
    print("refused", round(time.monotonic() - t0, 1), e, flush=True)
del other                                               # its dealloc: never blocks forever
print("dropped", flush=True)
sys.stdin.readline()                                    # the fake owner is dead
lim.release()                                           # the count held: retry it
print("after", lim.in_flight, flush=True)
"""


def test_release_and_dealloc_give_up_on_a_lock_word_naming_a_live_process(name, workers):
    Limiter(concurrency=5, shared=name)               # the region exists
    sleeper = workers.sleeper()
    p, deadline = start_on_a_stuck_word(workers, RELEASER, name, sleeper, "held 3")
    # release() gives up on the stuck word: no endless wait, signal handlers run
    line = wait_line(p, "re", time.monotonic() + 20)
    assert line.startswith("refused"), line
    assert f"held by live pid {sleeper.pid}" in line, line
    wait_line(p, "dropped", time.monotonic() + 20)   # the dealloc gave up too
    stop(sleeper)
    send(p)
    # nothing lost, nothing doubled: 3 held, the refused release kept its count, the
    # dropped object left its count for the reap, then one release
    assert wait_line(p, "after", deadline) == "after 2"
    assert p.wait(timeout=max(1, deadline - time.monotonic())) == 0, p.stderr.read()


# ------------------------------------------------------------- an entry's exit and release

# A script's objects by kind: a shared concurrency Limiter or KeyedLimiter (key "k").
OBJECTS = """
import os, signal, sys, time, slidewin
name, kind = sys.argv[1], sys.argv[2]
if kind == "keyed":
    lim = slidewin.KeyedLimiter(concurrency=5, shared=name, max_keys=100)  # one stripe
    entry = lambda: lim.entry("k")
    in_flight = lambda: lim.in_flight("k")
    release = lambda: lim.release("k")
else:
    lim = slidewin.Limiter(concurrency=5, shared=name)
    entry = lambda: lim.entry()
    in_flight = lambda: lim.in_flight
    release = lambda: lim.release()
"""

STUCK_EXITER = OBJECTS + """
held = [entry() for _ in range(3)]
for e in held:
    e.__enter__()
assert lim.try_acquire("k") if kind == "keyed" else lim.try_acquire()
print("held", in_flight(), flush=True)
sys.stdin.readline()                                    # the lock word is crafted
t0 = time.monotonic()
try:
    held[0].__exit__(None, None, None)
    print("exited", flush=True)
except OSError as e:
    print("refused", round(time.monotonic() - t0, 1), repr(held[0]), e, flush=True)
try:
    release()
    print("released", flush=True)
except OSError as e:
    print("refused release", e, flush=True)
sys.stdin.readline()                                    # the fake owner is dead
held[0].__exit__(None, None, None)                      # still entered: retry the exit
release()                                               # the count held: retry it
print("after", in_flight(), repr(held[0]), flush=True)
"""


@pytest.mark.parametrize("kind", ["limiter", "keyed"])
def test_an_entrys_exit_gives_up_on_a_lock_word_naming_a_live_process(name, kind, workers):
    """The exit of `with lim.entry()` (and a KeyedLimiter's release) gives up on a stuck lock
    word as release() does: OSError naming the pid, the entry still entered, nothing lost."""
    sleeper = workers.sleeper()
    p, deadline = start_on_a_stuck_word(workers, STUCK_EXITER, name, sleeper, "held 4", kind)
    # the exit gives up on the stuck word: no endless wait, signal handlers run
    line = wait_line(p, "re", time.monotonic() + 20)
    assert line.startswith("refused"), line
    assert "entered" in line and f"held by live pid {sleeper.pid}" in line, line
    line = wait_line(p, "re", time.monotonic() + 20)
    assert line.startswith("refused release"), line
    stop(sleeper)
    send(p)
    line = wait_line(p, "after", deadline)
    assert line.startswith("after 2 ") and "exited" in line, line   # 4 - 1 exit - 1 release
    assert p.wait(timeout=max(1, deadline - time.monotonic())) == 0, p.stderr.read()


STUCK_GROUP_EXITER = OBJECTS + """
p = slidewin.Limiter(concurrency=5)                      # private: exited first
assert p.try_acquire()
g = slidewin.all_of(p, (lim, "k") if kind == "keyed" else lim)
ge = g.entry()
ge.__enter__()
print("held", p.in_flight, in_flight(), flush=True)
sys.stdin.readline()                                    # the lock word is crafted
try:
    ge.__exit__(None, None, None)
    print("exited", flush=True)
except OSError as e:
    print("refused", p.in_flight, e, flush=True)
sys.stdin.readline()                                    # the fake owner is dead
print("still", in_flight(), flush=True)
ge.__exit__(None, None, None)                           # the rest of the exit, once
print("after", p.in_flight, in_flight(), p.totals()["success"], lim.totals()["success"],
      flush=True)
try:
    ge.__exit__(None, None, None)
except RuntimeError:
    print("done", flush=True)
"""


@pytest.mark.parametrize("kind", ["limiter", "keyed"])
def test_a_group_entrys_exit_gives_up_on_a_lock_word_naming_a_live_process(name, kind,
                                                                           workers):
    """The exit of `with all_of(...).entry()` gives up on a member's stuck lock word as a lone
    entry's exit does: OSError, the members not yet exited still held; a retry of the exit
    finishes the others, each member exited exactly once."""
    sleeper = workers.sleeper()
    p, deadline = start_on_a_stuck_word(workers, STUCK_GROUP_EXITER, name, sleeper, "held 2 1",
                                        kind)
    # the group's exit gives up on the stuck word (no endless wait)
    line = wait_line(p, "re", time.monotonic() + 20)
    assert line.startswith("refused 1 "), line          # the private member has exited
    assert f"held by live pid {sleeper.pid}" in line, line
    stop(sleeper)
    send(p)
    assert wait_line(p, "still", deadline) == "still 1"             # the shared one: held
    assert wait_line(p, "after", deadline) == "after 1 0 1 1"   # nothing doubled, nothing lost
    assert wait_line(p, "done", deadline) == "done"
    assert p.wait(timeout=max(1, deadline - time.monotonic())) == 0, p.stderr.read()


STOPPED_HOLDER = OBJECTS + """
from slidewin import _core
print("attached", flush=True)
sys.stdin.readline()
_core._set_test_hook(-1)   # stop this process (SIGSTOP) inside the next critical section
assert lim.try_acquire("k") if kind == "keyed" else lim.try_acquire()
print("resumed", flush=True)
sys.stdin.readline()
"""

ALARMED_EXITER = OBJECTS + """
held = [entry() for _ in range(3)]
for e in held:
    e.__enter__()
print("held", in_flight(), flush=True)
holder = int(sys.stdin.readline())                      # stopped inside the lock now
""" + ALARM + """# 1. a handler's exception interrupts the exit's wait; the entry stays entered
signal.setitimer(signal.ITIMER_REAL, 0.3)
try:
    held[0].__exit__(None, None, None)
    print("alarm not raised", flush=True)
except Alarm:
    print("alarm raised", repr(held[0]), flush=True)
# 2. a wait that cannot give up (a read) runs the handlers too: this one resumes the holder,
#    and its exception comes out after the read, never with a value
def resume(signum, frame):
    os.kill(holder, signal.SIGCONT)
    raise Alarm()
signal.signal(signal.SIGALRM, resume)
signal.setitimer(signal.ITIMER_REAL, 0.3)
try:
    n = in_flight()
    for _ in range(10000):
        pass                                            # the handler's exception lands here
    print("read not interrupted", n, flush=True)
except Alarm:
    print("read interrupted", flush=True)
held[0].__exit__(None, None, None)                      # retry: the holder runs again
print("after", in_flight(), repr(held[0]), flush=True)
"""


@pytest.mark.parametrize("kind", ["limiter", "keyed"])
def test_an_entrys_exit_waiting_for_a_stopped_holder_runs_signal_handlers(name, kind, workers):
    deadline = time.monotonic() + DEADLINE
    exiter = workers.py(ALARMED_EXITER, name, kind)
    holder = workers.py(STOPPED_HOLDER, name, kind)
    assert wait_line(exiter, "held", deadline) == "held 3"
    wait_line(holder, "attached", deadline)
    send(holder)
    wait_stopped(holder.pid, deadline)                 # stopped inside the lock
    send(exiter, str(holder.pid))
    # the exit's wait for the lock runs the signal handler (no hang)
    line = wait_line(exiter, "alarm", time.monotonic() + 20)
    assert line.startswith("alarm raised") and "entered" in line, line
    # so does a read's wait for the lock
    assert wait_line(exiter, "read", time.monotonic() + 20) == "read interrupted"
    assert wait_line(holder, "resumed", deadline) == "resumed"
    line = wait_line(exiter, "after", deadline)
    # nothing lost, nothing doubled: 3 held, one exited once, the holder's 1
    assert line.startswith("after 3 ") and "exited" in line, line
    assert exiter.wait(timeout=max(1, deadline - time.monotonic())) == 0, exiter.stderr.read()


@pytest.mark.parametrize("kind", ["Limiter", "AdaptiveLimiter"])
def test_counts_released_for_a_killed_process_are_not_given_back_twice(name, kind, workers):
    # a process releases another's counts and acquires its own, then the other is killed:
    # the reap gives back only what the dead process still held (never 4 in flight under 2)
    make = (f"slidewin.Limiter(concurrency=2, shared={name!r})" if kind == "Limiter" else
            f"slidewin.AdaptiveLimiter(initial_limit=2, max_limit=2, shared={name!r})")
    lim = eval(make, {"slidewin": slidewin})
    kid = workers.py(f"""
        import sys, time, slidewin
        lim = {make}
        assert lim.try_acquire() and lim.try_acquire()
        print("holding", flush=True)
        time.sleep(60)
    """)
    assert kid.lines.get(timeout=DEADLINE) == "holding\n"
    lim.release()
    lim.release()                         # the kid's two, released here
    assert lim.in_flight == 0
    assert lim.try_acquire() and lim.try_acquire()
    stop(kid)
    deadline = time.monotonic() + 10
    while not lim._reap():                 # the kid's slot (once its death shows)
        assert time.monotonic() < deadline, "the killed process's slot was never reaped"
        time.sleep(0.05)
    admitted = sum(lim.try_acquire() for _ in range(5))
    assert admitted == 0                  # never more than 2 in flight
    assert lim.in_flight == 2
    lim.release(2)
