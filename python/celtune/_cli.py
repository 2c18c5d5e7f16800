"""The `celtune` command of the pip package: runs the CLI binary installed in the package."""
import os
import sys
from pathlib import Path


def main() -> None:
    exe = Path(__file__).resolve().parent / "bin" / "celtune"
    if not exe.is_file():
        sys.exit(f"celtune: the CLI is not installed beside the package ({exe})")
    os.execv(str(exe), [str(exe), *sys.argv[1:]])


if __name__ == "__main__":
    main()
