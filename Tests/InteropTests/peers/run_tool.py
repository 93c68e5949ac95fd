"""Runs one of Bumble's command-line tools from the venv (the name as installed, e.g. bumble-pair), with
colour codes stripped from its output so that the test can read it line by line."""
import os
import re
import subprocess
import sys

tool = os.path.join(os.path.dirname(sys.executable), sys.argv[1])
ansi = re.compile(r'\x1b\[[0-9;]*m')
proc = subprocess.Popen([tool] + sys.argv[2:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        env=dict(os.environ, PYTHONUNBUFFERED='1'))
for raw in proc.stdout:
    print(ansi.sub('', raw.decode(errors='replace')).rstrip(), flush=True)
sys.exit(proc.wait())
