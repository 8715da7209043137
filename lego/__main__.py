"""`python -m lego`: the `lego` command, so ``torchrun ... -m lego train`` starts every rank with it."""

from lego.conductor.cli.main import main

if __name__ == "__main__":
    main()
