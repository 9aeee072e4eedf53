#!/usr/bin/env bash
# ctest test_readme_snippets: every [readme:NAME] ... [/readme] region of examples/ (the lines
# between the two markers, dedented) appears verbatim in README.md, inside one code block that
# follows a line naming the example's file. So the README's code is code that CI builds and runs.
#   check_snippets.sh SOURCE_DIR
set -euo pipefail
exec python3 - "$1" <<'EOF_PY'
import os, re, sys, textwrap
root = sys.argv[1]
readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, re.S)
found, bad = 0, []
for dirpath, _, files in os.walk(os.path.join(root, "examples")):
    for name in sorted(files):
        if not name.endswith((".c", ".py")):
            continue
        path = os.path.join(dirpath, name)
        rel = os.path.relpath(path, root)
        lines = open(path, encoding="utf-8").read().splitlines()
        start = None
        for i, line in enumerate(lines):
            m = re.search(r"\[readme:([a-z0-9-]+)\]", line)
            if m:
                start, tag = i + 1, m.group(1)
            elif "[/readme]" in line and start is not None:
                snippet = textwrap.dedent("\n".join(lines[start:i])).strip("\n") + "\n"
                found += 1
                if not any(snippet in b for b in blocks):
                    bad.append("%s [readme:%s]: not in any README.md code block" % (rel, tag))
                elif rel not in readme:
                    bad.append("%s: README.md does not name the file" % rel)
                start = None
if bad or not found:
    print("\n".join(bad) or "no [readme:NAME] regions found under examples/")
    sys.exit(1)
print("%d snippets of examples/ appear verbatim in README.md" % found)
EOF_PY
