#!/usr/bin/env python3
"""Keeps the documentation true to the tree and to the pipetrain command.

Usage: check_docs.py SOURCE_DIR [PIPETRAIN]

Checks, over README.md, docs/**/*.md and examples/**/*.md:
  links     every relative link and image resolves to a file or folder of the tree; a
            link to a heading (page.md#anchor, or #anchor) names a heading that gives
            that anchor the way GitHub makes them;
  commands  every pipetrain command shown in a sh/bash/console/shell block of README.md,
            docs/user/*.md and examples/*.md parses: PIPETRAIN --parse-only ARGS exits 0
            (run in an empty folder; files need not exist). Leading `$ ` prompts, `\\` continuations
            and VAR=value prefixes are handled; a line is cut at its first pipe, redirect
            or `;`/`&`; lines that use `$(...)`, backticks or shell variables are counted
            as skipped. `launch ... -- pipetrain ...` checks the inner command too;
  index     docs/README.md links every page under docs/, and docs/bench/ pages are named
            YYYY-MM-DD-topic.md;
  paths     every repository path named in code spans (`src/...`, `tests/...`, ...) exists,
            outside docs/bench/ (dated pages name what existed then);
  layers    the layer map in docs/dev/architecture.md lists the rows of scripts/check-layers;
  snippets  every cpp block of docs/user/cpp-api.md is an excerpt of an example the build
            compiles (examples/*.cpp): its non-blank lines, in order, are consecutive
            non-blank lines of one of them, so no snippet shows code that does not compile.
Without PIPETRAIN the commands are found and counted but not run (ctest always gives it).
Exits 1 listing every problem found.
"""
import ast
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import urllib.parse

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^\s`]*)")
LINK = re.compile(r"(!?)\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*(<[^>]*>|[^()\s]*(?:\([^()]*\)[^()\s]*)*)"
                  r"(?:\s+\"[^\"]*\"|\s+'[^']*')?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
HTML_LINK = re.compile(r"<(?:img|a)\b[^>]*?\b(?:src|href)\s*=\s*\"([^\"]*)\"", re.I)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:name|id)\s*=\s*\"([^\"]+)\"", re.I)
COMMAND_BLOCKS = {"sh", "bash", "console", "shell", "shell-session"}
PROGRAMS = ("pipetrain", "build/src/pipetrain", "./build/src/pipetrain", "$PIPETRAIN")
LEADING_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=(?:\"[^\"]*\"|'[^']*'|\S*)\s+")
CODE_PATH = re.compile(r"`((?:src|include|tests|bench|scripts|examples|cmake|clusters|docs)/"
                       r"[A-Za-z0-9_.+/-]*)`")
BENCH_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}-[a-z0-9]+(?:-[a-z0-9]+)*\.md$")


def markdown_files(root):
    files = [root / "README.md"]
    for folder in ("docs", "examples"):
        files += sorted((root / folder).rglob("*.md"))
    return [f for f in files if f.is_file()]


def split_fences(text):
    """Yields (in_fence, info, line_number, line) for every line."""
    fence = None
    info = ""
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence, info = match.group(2), match.group(3).lower()
            yield True, info, number, None  # the opening line itself
            continue
        if fence is not None and line.strip().startswith(fence[0] * len(fence)) and \
                set(line.strip()) <= {fence[0]}:
            fence = None
            yield True, info, number, None
            continue
        yield fence is not None, info, number, line


def strip_code_spans(line):
    return re.sub(r"(`+)(?:(?!\1).)*?\1", "", line)


def github_anchor(heading):
    """The anchor GitHub gives a heading: inline markup dropped, lower case, punctuation
    other than '-' and '_' removed, spaces made '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"(?<!\w)_+|_+(?!\w)", "", text)  # emphasis, not snake_case
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def anchors_of(path, cache={}):
    if path not in cache:
        found = set()
        counts = {}
        text = path.read_text(encoding="utf-8")
        for in_fence, _, _, line in split_fences(text):
            if in_fence or line is None:
                continue
            found.update(EXPLICIT_ANCHOR.findall(line))
            match = HEADING.match(line)
            if not match:
                continue
            anchor = github_anchor(match.group(2))
            n = counts.get(anchor, 0)
            counts[anchor] = n + 1
            found.add(anchor if n == 0 else f"{anchor}-{n}")
        cache[path] = found
    return cache[path]


def check_links(root, files, problems):
    count = 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(root)
        targets = []
        for in_fence, _, number, line in split_fences(text):
            if in_fence or line is None:
                continue
            bare = strip_code_spans(line)
            targets += [(number, m.group(3)) for m in LINK.finditer(bare)]
            targets += [(number, m.group(1)) for m in HTML_LINK.finditer(bare)]
            targets += [(number, m.group(1)) for m in REFERENCE.finditer(bare)]
        for number, target in targets:
            target = target.strip()
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # an address elsewhere (http:, mailto:): not this check's business
            count += 1
            where = f"{rel}:{number}"
            file_part, _, anchor = target.partition("#")
            file_part = urllib.parse.unquote(file_part)
            if file_part.startswith("/"):
                problems.append(f"{where}: link '{target}' is absolute; use a relative path")
                continue
            resolved = (path.parent / file_part).resolve() if file_part else path
            try:
                resolved.relative_to(root)
            except ValueError:
                problems.append(f"{where}: link '{target}' points outside the repository")
                continue
            if not resolved.exists():
                problems.append(f"{where}: link '{target}': {resolved.relative_to(root)} does not exist")
                continue
            if anchor and resolved.suffix == ".md" and resolved.is_file():
                if urllib.parse.unquote(anchor) not in anchors_of(resolved):
                    problems.append(f"{where}: link '{target}': no heading in "
                                    f"{resolved.relative_to(root)} gives the anchor '#{anchor}'")
    return count


def shown_commands(path):
    """(line_number, command) for every pipetrain command of the file's shell blocks."""
    commands = []
    pending = None
    for in_fence, info, number, line in split_fences(path.read_text(encoding="utf-8")):
        if not in_fence or line is None or info not in COMMAND_BLOCKS:
            pending = None
            continue
        if pending is not None:
            start, text = pending
            text += " " + line.strip()
        else:
            stripped = line.strip()
            if stripped.startswith("$ "):
                stripped = stripped[2:].lstrip()
            start, text = number, stripped
        if text.endswith("\\"):
            pending = (start, text[:-1].rstrip())
            continue
        pending = None
        if text.startswith("#"):
            continue
        while LEADING_ASSIGNMENT.match(text):
            text = text[LEADING_ASSIGNMENT.match(text).end():]  # VAR=value before the program
        if text.split(maxsplit=1)[0:1] and text.split(maxsplit=1)[0] in PROGRAMS:
            commands.append((start, text))
    return commands


def cut_shell_syntax(command):
    """The command up to its first unquoted pipe, redirect, ';' or '&'; None when it
    needs the shell to expand something ($(...), backticks, $VAR)."""
    quote = None
    i = 0
    while i < len(command):
        c = command[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
            elif c in "$`" and quote == '"':
                return None
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c in "|<>;&":
            return re.sub(r"\s\d+$", "", command[:i]).rstrip()
        elif c == "`":
            return None
        elif c == "$":
            if not command.startswith("$PIPETRAIN", i) or i != 0:
                return None
        i += 1
    return command


def check_commands(root, binary, problems):
    files = ([root / "README.md"] + sorted((root / "docs" / "user").glob("*.md"))
             + sorted((root / "examples").glob("*.md")))
    checked = skipped = 0
    with tempfile.TemporaryDirectory(prefix="check_docs.") as empty:
        for path in files:
            rel = path.relative_to(root)
            for number, command in shown_commands(path):
                cut = cut_shell_syntax(command)
                if cut is None:
                    skipped += 1
                    continue
                try:
                    words = shlex.split(cut)
                except ValueError as e:
                    problems.append(f"{rel}:{number}: cannot split '{command}': {e}")
                    continue
                runs = [words[1:]]
                if len(words) > 2 and words[1] == "launch" and "--" in words:
                    inner = words[words.index("--") + 1:]
                    if inner and inner[0] in PROGRAMS:
                        runs.append(inner[1:])
                for args in runs:
                    checked += 1
                    if binary is None:
                        continue
                    try:
                        result = subprocess.run([str(binary), "--parse-only"] + args, cwd=empty,
                                                capture_output=True, text=True, timeout=60)
                    except subprocess.TimeoutExpired:
                        problems.append(f"{rel}:{number}: 'pipetrain {shlex.join(args)}' "
                                        "did not finish parsing within 60 s")
                        continue
                    if result.returncode != 0:
                        reason = (result.stderr or result.stdout).strip().splitlines()
                        problems.append(f"{rel}:{number}: 'pipetrain {shlex.join(args)}' does not "
                                        f"parse (exit {result.returncode}): "
                                        f"{reason[-1] if reason else 'no message'}")
    return checked, skipped


def check_paths(root, files, problems):
    count = 0
    for path in files:
        rel = path.relative_to(root)
        if rel.parts[:2] == ("docs", "bench"):
            continue
        for in_fence, _, number, line in split_fences(path.read_text(encoding="utf-8")):
            if in_fence or line is None:
                continue
            for named in CODE_PATH.findall(line):
                count += 1
                if not (root / named.rstrip("/")).exists():
                    problems.append(f"{rel}:{number}: names {named}, which does not exist")
    return count


def check_index(root, problems):
    index = root / "docs" / "README.md"
    if not index.is_file():
        problems.append("docs/README.md: missing (the index of every page)")
        return 0
    text = index.read_text(encoding="utf-8")
    linked = set()
    for m in LINK.finditer(text):
        target = urllib.parse.unquote(m.group(3).strip("<>").partition("#")[0])
        if target:
            linked.add((index.parent / target).resolve())
    pages = [p for p in sorted((root / "docs").rglob("*.md")) if p != index]
    for page in pages:
        if page.resolve() not in linked:
            problems.append(f"docs/README.md: does not link {page.relative_to(root)}")
    for page in sorted((root / "docs" / "bench").glob("*.md")):
        if page.name != "README.md" and not BENCH_NAME.match(page.name):
            problems.append(f"{page.relative_to(root)}: a benchmark page is named YYYY-MM-DD-topic.md")
    return len(pages)


def check_layer_map(root, problems):
    script = (root / "scripts" / "check-layers").read_text(encoding="utf-8")
    rows = None
    for node in ast.walk(ast.parse(script)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "ROWS" for t in node.targets):
            rows = ast.literal_eval(node.value)
    page = root / "docs" / "dev" / "architecture.md"
    text = page.read_text(encoding="utf-8") if page.is_file() else ""
    block = re.search(r"<!-- layer map[^>]*-->(.*?)<!-- end of layer map -->", text, re.S)
    if rows is None or block is None:
        problems.append("docs/dev/architecture.md: no layer map between '<!-- layer map' and "
                        "'<!-- end of layer map -->', or no ROWS in scripts/check-layers")
        return 0
    shown = []
    for line in block.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if len(cells) < 2 or set(cells[0]) <= set("-: ") or cells[0] == "row":
            continue
        shown.append(re.findall(r"`([a-z_]+)`", cells[1]))
    expected = [list(r) for r in reversed(rows)]  # the page lists the highest row first
    if shown != expected:
        problems.append("docs/dev/architecture.md: the layer map's rows (highest first) are "
                        f"{shown}, scripts/check-layers has {expected}")
    return len(shown)


def check_snippets(root, problems):
    """Every cpp block of cpp-api.md lies whole in a compiled example; returns the count."""
    page = root / "docs" / "user" / "cpp-api.md"
    examples = {path: [line.rstrip() for line in path.read_text().splitlines() if line.strip()]
                for path in sorted((root / "examples").glob("*.cpp"))}
    blocks, block, fence = [], None, None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        opened = FENCE.match(line)
        if block is None and opened and opened.group(3) == "cpp":
            block, fence = (number, []), opened.group(2)
        elif block is not None and line.strip().startswith(fence):
            blocks.append(block)
            block = None
        elif block is not None and line.strip():
            block[1].append(line.rstrip())
    for number, lines in blocks:
        found = any(lines == text[i:i + len(lines)] for text in examples.values()
                    for i in range(len(text) - len(lines) + 1))
        if not found:
            problems.append(f"docs/user/cpp-api.md:{number}: the cpp block is no excerpt of "
                            "an example under examples/ (show compiled code)")
    return len(blocks)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1]).resolve()
    binary = pathlib.Path(sys.argv[2]).resolve() if len(sys.argv) == 3 else None
    problems = []
    if binary is not None and not os.access(binary, os.X_OK):
        problems.append(f"{binary}: not an executable pipetrain")
        binary = None
    files = markdown_files(root)
    links = check_links(root, files, problems)
    commands, skipped = check_commands(root, binary, problems)
    paths = check_paths(root, files, problems)
    pages = check_index(root, problems)
    rows = check_layer_map(root, problems)
    snippets = check_snippets(root, problems)
    ran = "checked" if binary is not None else "found (not run: no pipetrain given)"
    print(f"docs: {links} links in {len(files)} files, {commands} commands {ran}"
          f" ({skipped} skipped: shell expansions), {paths} paths, {pages} pages indexed,"
          f" {rows} layer rows, {snippets} C++ snippets compiled in examples/")
    if problems:
        print(f"docs: {len(problems)} problem(s):", file=sys.stderr)
        for problem in problems:
            print(f"  {problem}", file=sys.stderr)
        sys.exit(1)
    if binary is None:
        print("docs: the commands were not run; give the pipetrain binary to run them")


if __name__ == "__main__":
    main()
