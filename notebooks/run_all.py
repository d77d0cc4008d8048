"""Execute the numbered notebooks with papermill: `hkv.report.runner` does the work.

python notebooks/run_all.py [--only 02 03] [-p NAME VALUE]   # HTML always, into out/html
"""

from hkv.report.runner import main

if __name__ == "__main__":
    raise SystemExit(main())
