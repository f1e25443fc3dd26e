"""``python -m conformance.fuzz``: the same as ``zabref fuzz``."""

from conformance.fuzz.command import fuzz_command

if __name__ == "__main__":
    fuzz_command()
