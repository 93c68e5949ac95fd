"""Runs one of Bumble's command-line tools from the venv (the name as installed, e.g. bumble-pair), with
colour codes stripped from its output so that the test can read it line by line."""
import ctypes
import os
import re
import signal
import subprocess
import sys

tool = os.path.join(os.path.dirname(sys.executable), sys.argv[1])
ansi = re.compile(r'\x1b\[[0-9;]*m')


def die_with_parent():
    # The tool ignores SIGTERM and may leave our process group: it gets SIGKILL when this wrapper dies.
    ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGKILL)


proc = subprocess.Popen([tool] + sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        env=dict(os.environ, PYTHONUNBUFFERED='1'), preexec_fn=die_with_parent)
for raw in proc.stdout:
    print(ansi.sub('', raw.decode(errors='replace')).rstrip(), flush=True)
sys.exit(proc.wait())
