from hkv.cli.main import main

raise SystemExit(main())
