"""Runs a peer so that it dies with the test process: the peer gets SIGKILL if this guard dies
(PR_SET_PDEATHSIG), and the guard kills the peer when its stdin closes (the test process is gone) or when
it gets SIGTERM. Usage: guard.py PROGRAM ARGS..."""
import ctypes
import os
import signal
import subprocess
import sys
import threading

libc = ctypes.CDLL('libc.so.6', use_errno=True)
PR_SET_PDEATHSIG = 1


def die_with_parent():
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# The peer leads a process group of its own, so its children (bumble-pair under a wrapper, say) go with it.
child = subprocess.Popen(sys.argv[1:], preexec_fn=die_with_parent, start_new_session=True)


def kill_group(sig):
    try:
        os.killpg(child.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop(*_):
    kill_group(signal.SIGTERM)
    try:
        child.wait(timeout=0.5)   # the test SIGKILLs this guard after 2 s: leave time for the group kill
    except subprocess.TimeoutExpired:
        pass
    kill_group(signal.SIGKILL)
    os._exit(0)


signal.signal(signal.SIGTERM, stop)


def watch_stdin():
    try:
        while sys.stdin.buffer.read(1):
            pass
    finally:
        stop()


threading.Thread(target=watch_stdin, daemon=True).start()
code = child.wait()
kill_group(signal.SIGKILL)   # whatever the peer left running
sys.stdout.flush()
# os._exit, not sys.exit: interpreter shutdown with the stdin watcher still reading aborted the guard ("Fatal Python
# error: _enter_buffered_busy"), so a peer that ended cleanly was reported as exited with 6 (SIGABRT).
os._exit(code if code >= 0 else 128 - code)
