#!/usr/bin/env python3
"""The longest functions of src/: name, file and lines (from the line of the signature to the
closing brace, as universal-ctags reports them; lambdas count in the function that holds them).

  bench/function_lengths.py [--top N] [--under src/runtime] [--max-lines L]

With --max-lines, exits 1 when a listed function is longer than L lines.
"""
import argparse
import pathlib
import subprocess
import sys


def functions(root, under):
    files = sorted(str(p.relative_to(root)) for p in pathlib.Path(root, under).rglob("*")
                   if p.suffix in (".cpp", ".hpp"))
    out = subprocess.run(["ctags", "--c++-kinds=f", "--fields=+neS", "-o", "-", *files],
                         cwd=root, check=True, capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        name, path, *_ = line.split("\t")
        fields = dict(f.split(":", 1) for f in line.split("\t")[3:] if ":" in f)
        if "line" not in fields or "end" not in fields:
            continue
        scope = fields.get("class") or fields.get("namespace") or fields.get("struct") or ""
        scope = scope.rsplit("::", 1)[-1]
        if scope.startswith("__anon"):
            scope = ""
        full = f"{scope}::{name}" if scope else name
        lines = int(fields["end"]) - int(fields["line"]) + 1
        found[(path, int(fields["line"]))] = (lines, full, path)
    return sorted(found.values(), key=lambda f: (-f[0], f[2], f[1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--under", default="src")
    parser.add_argument("--max-lines", type=int)
    args = parser.parse_args()
    root = pathlib.Path(__file__).resolve().parent.parent
    listed = functions(root, args.under)
    print(f"| lines | function | file |\n|---:|---|---|")
    for lines, name, path in listed[: args.top]:
        print(f"| {lines} | `{name}` | {path} |")
    if args.max_lines is not None:
        over = [f for f in listed if f[0] > args.max_lines]
        if over:
            print(f"{len(over)} function(s) under {args.under} over {args.max_lines} lines", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
