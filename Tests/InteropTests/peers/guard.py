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


child = subprocess.Popen(sys.argv[1:], preexec_fn=die_with_parent)


def stop(*_):
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=3)
        except subprocess.TimeoutExpired:
            child.kill()
    os._exit(0)


signal.signal(signal.SIGTERM, stop)


def watch_stdin():
    try:
        while sys.stdin.buffer.read(1):
            pass
    finally:
        stop()


threading.Thread(target=watch_stdin, daemon=True).start()
sys.exit(child.wait())
