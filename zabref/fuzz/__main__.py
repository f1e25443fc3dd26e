"""``python -m zabref.fuzz``: the same as ``zabref fuzz``."""

from zabref.fuzz.command import fuzz_command

if __name__ == "__main__":
    fuzz_command()
