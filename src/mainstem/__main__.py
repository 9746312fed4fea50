"""`python -m mainstem ...` is the `mainstem` command."""

from mainstem.cli import main

raise SystemExit(main())
