# Copyright 2026 the OpenCoreBluetooth authors
# SPDX-License-Identifier: Apache-2.0
#
# Every symbol a catalog lists under a "Linux additions" heading (what Apple's framework does not have) must
# be documented: a doc comment in the source, or a documentation extension page in the catalog. DocC has
# already failed on links to symbols that do not exist; this fails on listed symbols with no words.
# Usage: python3 scripts/docs-linux-additions.py MODULE CATALOG SYMBOL-GRAPH-DIR
import json
import os
import re
import sys

module, catalog, graphs = sys.argv[1:4]

documented = {}
for name in os.listdir(graphs):
    if not name.endswith(".symbols.json"):
        continue
    with open(os.path.join(graphs, name)) as f:
        for s in json.load(f)["symbols"]:
            path = "/".join(s["pathComponents"])
            documented[path] = documented.get(path, False) or bool(s.get("docComment", {}).get("lines"))

extensions = set()
listed = []
for root, _, files in os.walk(catalog):
    for name in files:
        if not name.endswith(".md"):
            continue
        text = open(os.path.join(root, name)).read()
        first = text.lstrip().split("\n", 1)[0]
        m = re.match(r"# ``(?:%s/)?([^`]+)``" % re.escape(module), first)
        body = text.split("## Topics")[0].split("\n", 1)[-1].strip() if m else ""
        if m and body:
            extensions.add(m.group(1))
        in_section = False
        for line in text.split("\n"):
            if line.startswith("#"):
                in_section = "Linux additions" in line
                continue
            if in_section:
                for link in re.findall(r"- ``([^`]+)``", line):
                    listed.append((name, link.removeprefix(module + "/")))

def key(link):
    # DocC links may carry a disambiguation suffix (-swift.property, -1abcd): match by path without it.
    return "/".join(re.sub(r"-[0-9a-z.]+$", "", part) if "(" not in part else part for part in link.split("/"))

missing = []
for page, link in listed:
    k = key(link)
    if documented.get(k) or k in extensions:
        continue
    missing.append(f"{page}: ``{link}``")
if not listed:
    print(f"docs: {module}: no 'Linux additions' section lists any symbol")
    sys.exit(1)
if missing:
    print(f"docs: {module}: Linux additions without documentation:")
    print("\n".join("  " + m for m in missing))
    sys.exit(1)
print(f"docs: {module}: {len(listed)} Linux additions, each documented")
