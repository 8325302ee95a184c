"""Text to byte tokens for madpipe: train.bin and val.bin (uint16, as nanoGPT's).

    python prepare.py [--data /usr/share/common-licenses] [--output-dir .]

Every byte of the text files (a file, or a directory read recursively in name order) is a token
id in [0, 256); the last tenth goes to val.bin.
"""
import argparse
import os

import numpy as np


def read_text(path):
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return f.read()
    chunks = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            with open(os.path.join(root, name), "rb") as f:
                chunks.append(f.read())
    return b"".join(chunks)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="/usr/share/common-licenses")
    parser.add_argument("--output-dir", default=".")
    args = parser.parse_args()
    tokens = np.frombuffer(read_text(args.data), dtype=np.uint8).astype(np.uint16)
    split = len(tokens) * 9 // 10
    tokens[:split].tofile(os.path.join(args.output_dir, "train.bin"))
    tokens[split:].tofile(os.path.join(args.output_dir, "val.bin"))
    print(f"wrote train.bin ({split} tokens) and val.bin ({len(tokens) - split} tokens)")
