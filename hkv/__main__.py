"""`python -m hkv ...` is the `hkv` command."""

from hkv.cli.main import main

raise SystemExit(main())
