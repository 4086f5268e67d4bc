"""The `stackcurate` console script: `train` and `generate` go to the light trainer CLI (torch, numpy and
transformers only), everything else to the full CLI, which imports the stages."""

import sys

LIGHT = ("train", "generate")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in LIGHT:
        from stackcurate.train.cli import main as light

        return light(argv)
    from stackcurate.cli import main as full

    return full(argv)


if __name__ == "__main__":
    sys.exit(main())
